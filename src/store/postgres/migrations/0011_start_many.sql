-- The starts waiting at one moment written in one transaction: a transaction is most of what
-- a start costs the database, and at load many starts wait at once. Each start is what
-- `agent_runner_start` (migration 0009) writes for it, with its arguments taken from the
-- arrays at one index; the answer is one row per start, in their order: `inserted` with its
-- place, `key_taken`, or `decide` where `agent_runner_start` would have raised `LIVE0` or
-- `LIMIT` (that start wrote nothing, its key included, and the service takes the way that
-- decides for it alone).
--
-- Locks are taken in one order by every transaction that starts messages: idempotency keys
-- first, then tenants' admission locks, then conversations' locks (a lone start takes one
-- of each, in that order). A batch takes its keys ordered by tenant and key, then each
-- class of lock ordered by its hash, all before its first message, so two batches (on
-- one replica or two) never each hold what the other waits for.
--
-- `p_again`: a second try after the first one's connection was lost; a start whose message
-- is already written with its id, by this owner in this conversation, is the first try's,
-- and its place is answered.
CREATE FUNCTION agent_runner_start_many(
    p_tenant text[],
    p_id uuid[],
    p_conversation uuid[],
    p_conversation_record text[],
    p_head text[],
    p_tail text[],
    p_spec text[],
    p_owner text,
    p_epoch bigint,
    p_agent_id text[],
    p_parent uuid[],
    p_lock text[],
    p_alone boolean[],
    p_key text[],
    p_fingerprint text[],
    p_again boolean,
    p_limits text[],
    p_child boolean[],
    p_max_running integer[],
    p_per_minute integer[],
    p_max_children integer[]
) RETURNS TABLE (outcome text, placed_seq bigint, placed_ordinal bigint)
LANGUAGE plpgsql AS $$
DECLARE
    n integer := coalesce(array_length(p_id, 1), 0);
    outcomes text[] := array_fill(NULL::text, ARRAY[n]);
    seqs bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    ordinals bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    i integer;
    lock_key bigint;
    found_seq bigint;
    found_ordinal bigint;
    answer text;
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_again THEN
        FOR i IN 1 .. n LOOP
            SELECT m.seq, m.ordinal INTO found_seq, found_ordinal FROM messages m
                WHERE m.tenant = p_tenant[i] AND m.id = p_id[i]
                  AND m.conversation_id = p_conversation[i] AND m.owner = p_owner;
            IF FOUND THEN
                outcomes[i] := 'inserted';
                seqs[i] := found_seq;
                ordinals[i] := found_ordinal;
            END IF;
        END LOOP;
    END IF;
    FOR i IN SELECT k.at FROM unnest(p_tenant, p_key) WITH ORDINALITY AS k(tenant, key, at)
            WHERE k.key IS NOT NULL ORDER BY k.tenant, k.key, k.at LOOP
        IF outcomes[i] IS NULL THEN
            INSERT INTO idempotency_keys (tenant, key, message_id, fingerprint)
                VALUES (p_tenant[i], p_key[i], p_id[i], p_fingerprint[i]) ON CONFLICT DO NOTHING;
            IF NOT FOUND THEN
                outcomes[i] := 'key_taken';
            END IF;
        END IF;
    END LOOP;
    FOR lock_key IN SELECT DISTINCT hashtextextended(l.name, 0) AS h
            FROM unnest(p_limits) AS l(name) WHERE l.name IS NOT NULL ORDER BY h LOOP
        PERFORM pg_advisory_xact_lock(lock_key);
    END LOOP;
    FOR lock_key IN SELECT DISTINCT hashtextextended(l.name, 0) AS h
            FROM unnest(p_lock) AS l(name) ORDER BY h LOOP
        PERFORM pg_advisory_xact_lock(lock_key);
    END LOOP;
    FOR i IN 1 .. n LOOP
        CONTINUE WHEN outcomes[i] IS NOT NULL;
        BEGIN
            -- Its key is taken above: the call takes none. The locks it takes are held.
            SELECT s.outcome, s.placed_seq, s.placed_ordinal
                INTO answer, found_seq, found_ordinal
                FROM agent_runner_start(
                    p_tenant[i], p_id[i], p_conversation[i], p_conversation_record[i],
                    p_head[i], p_tail[i], p_spec[i], p_owner, p_epoch, p_agent_id[i],
                    p_parent[i], p_lock[i], p_alone[i], NULL, NULL, false, p_limits[i],
                    p_child[i], p_max_running[i], p_per_minute[i], p_max_children[i]) s;
            outcomes[i] := answer;
            seqs[i] := found_seq;
            ordinals[i] := found_ordinal;
        EXCEPTION WHEN SQLSTATE 'LIVE0' OR SQLSTATE 'LIMIT' THEN
            outcomes[i] := 'decide';
            IF p_key[i] IS NOT NULL THEN
                DELETE FROM idempotency_keys
                    WHERE tenant = p_tenant[i] AND key = p_key[i] AND message_id = p_id[i];
            END IF;
        END;
    END LOOP;
    RETURN QUERY SELECT o.outcome, o.seq, o.ordinal
        FROM unnest(outcomes, seqs, ordinals) WITH ORDINALITY AS o(outcome, seq, ordinal, at)
        ORDER BY o.at;
END
$$;
