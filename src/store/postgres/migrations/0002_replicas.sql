-- Replicas sharing the database. Each renews its row's lease about five times per lease;
-- one whose lease passed is gone, and its peers end the runs it owned. `instance` tells a
-- restart (a new claim on the same id) from the process that held the id before.
CREATE TABLE replicas (
    id          text PRIMARY KEY,
    instance    uuid NOT NULL,
    lease_until timestamptz NOT NULL,
    started_at  timestamptz NOT NULL
);

-- The sweep looks for running messages by owner.
CREATE INDEX messages_running_owner ON messages (owner) WHERE running;

-- Commands for runs (cancel, tool outputs, approvals), kept by whichever replica a caller
-- reached until the run's owner takes them.
CREATE TABLE run_commands (
    id         bigserial PRIMARY KEY,
    tenant     text NOT NULL,
    message_id uuid NOT NULL,
    command    text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX run_commands_message ON run_commands (tenant, message_id);

-- Changes to API keys and tool providers, counted so every replica sees within a second
-- that its caches must be read again (a revoked key refused everywhere).
CREATE SEQUENCE api_key_changes;
CREATE SEQUENCE provider_changes;

-- When each message started: a tenant's starts in the last minute are counted over every
-- replica (its limit of runs per minute).
ALTER TABLE messages ADD COLUMN created_at timestamptz NOT NULL DEFAULT now();
CREATE INDEX messages_tenant_started ON messages (tenant, created_at);
