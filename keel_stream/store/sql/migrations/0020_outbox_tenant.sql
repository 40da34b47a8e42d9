-- keel:no-transaction
-- The relay reads its shard tenant by tenant (a shard is a set of tenants), oldest first, so
-- the other shards' backlog is never read.
DROP INDEX CONCURRENTLY IF EXISTS outbox_tenant;
CREATE INDEX CONCURRENTLY outbox_tenant ON outbox (tenant_id, id);
