-- Tenant usage is counted in shards: every run of a tenant adds to its day's count, and
-- one row would make concurrent commits wait for each other's WAL flush. A count is the
-- sum of its shards.
ALTER TABLE tenant_usage ADD COLUMN shard smallint NOT NULL DEFAULT 0;
ALTER TABLE tenant_usage DROP CONSTRAINT tenant_usage_pkey;
ALTER TABLE tenant_usage ADD PRIMARY KEY (tenant, day, shard);
