-- keel:no-transaction
-- The claim visits each tenant with pending runs once (a skip scan over tenant_id) and reads only
-- that tenant's oldest pending run: an index range per tenant, however deep one tenant's backlog.
DROP INDEX CONCURRENTLY IF EXISTS runs_pending_by_tenant;
CREATE INDEX CONCURRENTLY runs_pending_by_tenant ON runs (tenant_id, updated_at)
    WHERE status = 'pending';
