-- keel:no-transaction
-- The claim's fairness counts each tenant's running attempts: an index range per tenant.
DROP INDEX CONCURRENTLY IF EXISTS runs_running_by_tenant;
CREATE INDEX CONCURRENTLY runs_running_by_tenant ON runs (tenant_id) WHERE status = 'running';
