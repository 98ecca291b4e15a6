-- Whether a live message is queued (conversation_policy ENQUEUE): it takes no slot of its
-- tenant's running messages and is no start in its last minute until it starts, when this
-- turns false and `created_at` becomes the moment of its start.
ALTER TABLE messages ADD COLUMN queued boolean NOT NULL DEFAULT false;
