-- The run that started a sub-agent's message (none for a top-level one), so a tenant's
-- limits count top-level runs and sub-agents' runs apart, each from an index. Replicas of
-- the release before leave it empty on what they write: their children count as
-- top-level until those end.
ALTER TABLE messages ADD COLUMN parent_id uuid;
-- Read from the record's text, not cast to jsonb: a record may hold text jsonb refuses.
UPDATE messages
    SET parent_id = substring(record FROM '"parent":\{"message_id":"([0-9a-f-]{36})"')::uuid
    WHERE record LIKE '%"parent":{"message_id":"%';
CREATE INDEX messages_running_children ON messages (tenant) WHERE running AND parent_id IS NOT NULL;
