-- keel:no-transaction
-- The takeover probe: running runs by lease expiry, so the expired leases are an index range
-- (lease_expires_at < now()) and the healthy ones are never read.
DROP INDEX CONCURRENTLY IF EXISTS runs_lease_expiry;
CREATE INDEX CONCURRENTLY runs_lease_expiry ON runs (lease_expires_at) WHERE status = 'running';
