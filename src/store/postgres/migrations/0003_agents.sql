-- Stored agents, by tenant and id (ids compare bytewise, as the embedded store orders
-- them); the record holds the labels listings filter on.
CREATE TABLE agents (
    tenant text NOT NULL,
    id     text COLLATE "C" NOT NULL,
    record jsonb NOT NULL,
    PRIMARY KEY (tenant, id)
);

-- Their immutable versions, numbered 1, 2, 3 … per agent under the agent row's lock.
CREATE TABLE agent_versions (
    tenant   text NOT NULL,
    agent_id text COLLATE "C" NOT NULL,
    version  integer NOT NULL,
    record   text NOT NULL,
    PRIMARY KEY (tenant, agent_id, version)
);
