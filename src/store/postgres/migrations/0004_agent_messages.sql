-- The stored agent that answered a top-level message (none for inline agents and for
-- sub-agents' runs), so A2A lists an agent's tasks newest first from an index. Message ids
-- are UUIDv7, so their order is the order the messages were made.
ALTER TABLE messages ADD COLUMN agent_id text COLLATE "C";
UPDATE messages SET agent_id = record::jsonb -> 'agent' ->> 'agent_id'
    WHERE record::jsonb -> 'parent' IS NULL AND record::jsonb -> 'agent' IS NOT NULL;
CREATE INDEX messages_by_agent ON messages (tenant, agent_id, id DESC)
    WHERE agent_id IS NOT NULL;
