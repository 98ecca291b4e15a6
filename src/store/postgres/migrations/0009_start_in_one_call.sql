-- A new message written in one round trip: what a start took five for (BEGIN, the
-- conversation's lock, its place, the insert, COMMIT). Each statement of a volatile function
-- reads with a snapshot of its own, so the place is read after the lock is held, as it was
-- in a statement after the lock's. It writes only when the start needs nothing decided by
-- the service; otherwise it raises, everything it wrote is rolled back, and the service takes
-- the way that decides: `LIVE0` when the conversation has a live message and `p_alone` says
-- the rule reads it, `LIMIT` when the tenant is at one of its limits. `p_limits` names the
-- tenant's admission lock, or is null when no limit applies to the message; with it, the
-- tenant's running messages (for a sub-agent's message, `p_child`, its running sub-agents'
-- messages) and its starts in the last minute are counted under that lock, as the service's
-- own transaction counts them. The record is `p_head`, the place's seq (and its ordinal
-- unless 0), then `p_tail`: the service's own JSON with its place written in. `p_again`: a
-- second try after the first one's connection was lost; a message already written with this
-- id, by this owner in this conversation, is the first try's, and its place is answered.
CREATE FUNCTION agent_runner_start(
    p_tenant text,
    p_id uuid,
    p_conversation uuid,
    p_conversation_record text,
    p_head text,
    p_tail text,
    p_spec text,
    p_owner text,
    p_epoch bigint,
    p_agent_id text,
    p_parent uuid,
    p_lock text,
    p_alone boolean,
    p_key text,
    p_fingerprint text,
    p_again boolean,
    p_limits text,
    p_child boolean,
    p_max_running integer,
    p_per_minute integer,
    p_max_children integer,
    OUT outcome text,
    OUT placed_seq bigint,
    OUT placed_ordinal bigint
) LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    IF p_again THEN
        SELECT m.seq, m.ordinal INTO placed_seq, placed_ordinal FROM messages m
            WHERE m.tenant = p_tenant AND m.id = p_id
              AND m.conversation_id = p_conversation AND m.owner = p_owner;
        IF FOUND THEN
            outcome := 'inserted';
            RETURN;
        END IF;
    END IF;
    IF p_key IS NOT NULL THEN
        INSERT INTO idempotency_keys (tenant, key, message_id, fingerprint)
            VALUES (p_tenant, p_key, p_id, p_fingerprint) ON CONFLICT DO NOTHING;
        IF NOT FOUND THEN
            outcome := 'key_taken';
            RETURN;
        END IF;
    END IF;
    IF p_limits IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(hashtextextended(p_limits, 0));
        IF p_child THEN
            IF (SELECT count(*) FROM messages m
                    WHERE m.tenant = p_tenant AND m.running AND m.parent_id IS NOT NULL)
                    >= p_max_children THEN
                RAISE EXCEPTION 'over the tenant''s limit of sub-agents' USING ERRCODE = 'LIMIT';
            END IF;
        ELSE
            IF p_max_running > 0 AND (SELECT count(*) FROM messages m
                    WHERE m.tenant = p_tenant AND m.running AND m.parent_id IS NULL
                      AND NOT m.queued) >= p_max_running THEN
                RAISE EXCEPTION 'over the tenant''s limit of running messages' USING ERRCODE = 'LIMIT';
            END IF;
            IF p_per_minute > 0 AND (SELECT count(*) FROM messages m
                    WHERE m.tenant = p_tenant AND m.created_at > now() - interval '1 minute'
                      AND m.parent_id IS NULL AND NOT m.queued) >= p_per_minute THEN
                RAISE EXCEPTION 'over the tenant''s limit of starts a minute' USING ERRCODE = 'LIMIT';
            END IF;
        END IF;
    END IF;
    IF p_conversation_record IS NOT NULL THEN
        INSERT INTO conversations (tenant, id, record)
            VALUES (p_tenant, p_conversation, p_conversation_record) ON CONFLICT DO NOTHING;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(p_lock, 0));
    SELECT m.seq, m.ordinal INTO placed_seq, placed_ordinal FROM messages m
        WHERE m.tenant = p_tenant AND m.conversation_id = p_conversation
        ORDER BY m.seq DESC LIMIT 1;
    IF p_alone AND EXISTS (SELECT 1 FROM messages m
            WHERE m.tenant = p_tenant AND m.conversation_id = p_conversation AND m.running) THEN
        RAISE EXCEPTION 'the conversation has a live message' USING ERRCODE = 'LIVE0';
    END IF;
    IF placed_seq IS NULL THEN
        placed_seq := 1;
        placed_ordinal := 1;
    ELSE
        placed_seq := placed_seq + 1;
        -- An ordinal of 0 is unknown (messages of earlier versions), and stays so.
        IF placed_ordinal <> 0 THEN
            placed_ordinal := placed_ordinal + 1;
        END IF;
    END IF;
    INSERT INTO messages (tenant, id, conversation_id, seq, ordinal, running, record, spec,
                          owner, epoch, agent_id, parent_id, queued)
        VALUES (p_tenant, p_id, p_conversation, placed_seq, placed_ordinal, true,
                p_head || placed_seq
                    || CASE WHEN placed_ordinal <> 0 THEN ',"ordinal":' || placed_ordinal ELSE '' END
                    || p_tail,
                p_spec, p_owner, p_epoch, p_agent_id, p_parent, false);
    outcome := 'inserted';
END
$$;
