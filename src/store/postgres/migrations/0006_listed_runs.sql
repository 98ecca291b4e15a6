-- The order a tenant's runs are listed in: a number the database gives each message as it
-- is written, so listings follow the database's order, never a replica's clock. Replicas of
-- the release before write it too (it is the column's default). Messages already stored
-- are numbered in the order of their ids (UUIDv7, the order they were made).
CREATE SEQUENCE messages_listed AS bigint;
ALTER TABLE messages ADD COLUMN listed bigint;
UPDATE messages m SET listed = o.n
    FROM (SELECT tenant, id, row_number() OVER (ORDER BY id) AS n FROM messages) o
    WHERE m.tenant = o.tenant AND m.id = o.id;
SELECT setval('messages_listed', coalesce((SELECT max(listed) FROM messages), 0) + 1, false);
ALTER TABLE messages ALTER COLUMN listed SET DEFAULT nextval('messages_listed');
ALTER TABLE messages ALTER COLUMN listed SET NOT NULL;
ALTER SEQUENCE messages_listed OWNED BY messages.listed;
-- One index for each way a listing reads: every top-level run, those not yet ended, one
-- stored agent's, one run's sub-agents' runs (a conversation's are read by its seq).
CREATE INDEX messages_listed_top ON messages (tenant, listed DESC) WHERE parent_id IS NULL;
CREATE INDEX messages_listed_live ON messages (tenant, listed DESC)
    WHERE running AND parent_id IS NULL;
CREATE INDEX messages_listed_agent ON messages (tenant, agent_id, listed DESC)
    WHERE agent_id IS NOT NULL;
CREATE INDEX messages_listed_children ON messages (tenant, parent_id, listed DESC)
    WHERE parent_id IS NOT NULL;
