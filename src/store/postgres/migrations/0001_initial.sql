-- The store's records. Records are JSON text of the service's own types (as the embedded
-- store keeps them; text, since text refuses the NUL characters a model or tool may
-- write); the columns beside them are what queries select, order and join on.

CREATE TABLE IF NOT EXISTS store_meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE conversations (
    tenant     text NOT NULL,
    id         uuid NOT NULL,
    record     text NOT NULL,
    PRIMARY KEY (tenant, id)
);

CREATE TABLE messages (
    tenant          text NOT NULL,
    id              uuid NOT NULL,
    conversation_id uuid NOT NULL,
    seq             bigint NOT NULL,
    ordinal         bigint NOT NULL,
    running         boolean NOT NULL,
    record          text NOT NULL,
    spec            text,
    owner           text NOT NULL DEFAULT 'local',
    epoch           bigint NOT NULL DEFAULT 0,
    -- When it ended, and whether its events were retired (all but its last), so retention
    -- finds ended messages by an index and never touches a running one.
    ended_at        timestamptz,
    events_retired  boolean NOT NULL DEFAULT false,
    PRIMARY KEY (tenant, id),
    UNIQUE (tenant, conversation_id, seq)
);
CREATE INDEX messages_running ON messages (tenant, id) WHERE running;
CREATE INDEX messages_retirable ON messages (ended_at)
    WHERE ended_at IS NOT NULL AND NOT events_retired;

CREATE TABLE thoughts (
    tenant     text NOT NULL,
    message_id uuid NOT NULL,
    position   integer NOT NULL,
    record     text NOT NULL,
    PRIMARY KEY (tenant, message_id, position)
);

CREATE TABLE events (
    tenant     text NOT NULL,
    message_id uuid NOT NULL,
    seq        bigint NOT NULL,
    record     text NOT NULL,
    PRIMARY KEY (tenant, message_id, seq)
);

CREATE TABLE files (
    tenant     text NOT NULL,
    id         uuid NOT NULL,
    message_id uuid NOT NULL,
    record     text NOT NULL,
    data       bytea,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX files_message ON files (tenant, message_id);

CREATE TABLE idempotency_keys (
    tenant      text NOT NULL,
    key         text NOT NULL,
    message_id  uuid NOT NULL,
    fingerprint text NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX idempotency_message ON idempotency_keys (tenant, message_id);

CREATE TABLE providers (
    tenant text NOT NULL,
    name   text NOT NULL,
    record text NOT NULL,
    sealed text NOT NULL,
    PRIMARY KEY (tenant, name)
);

CREATE TABLE api_keys (
    id     text PRIMARY KEY,
    record text NOT NULL
);

-- Counted in shards: every run of a tenant adds to its day's count, and one row would make
-- concurrent commits wait for each other's WAL flush. A count is the sum of its shards.
CREATE TABLE tenant_usage (
    tenant text NOT NULL,
    day    integer NOT NULL,
    shard  smallint NOT NULL,
    tokens bigint NOT NULL,
    PRIMARY KEY (tenant, day, shard)
);
