-- A conversation's live messages, oldest first: what a run that must start alone checks, under
-- the conversation's lock, as it takes its place.
CREATE INDEX messages_live_in_conversation ON messages (tenant, conversation_id, seq) WHERE running;
