-- keel:no-transaction
-- Superseded by runs_pending_by_tenant (0051): the claim ranks tenants and no query reads pending
-- runs across tenants in time order any more; the index only cost every run's status change.
DROP INDEX CONCURRENTLY IF EXISTS runs_pending;
