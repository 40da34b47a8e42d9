-- keel:no-transaction
-- The claim's first probe: pending runs, oldest first. Only rows that can be claimed are in it,
-- so a claim never walks the live leases (0018 finds the expired ones).
DROP INDEX CONCURRENTLY IF EXISTS runs_pending;
CREATE INDEX CONCURRENTLY runs_pending ON runs (updated_at) WHERE status = 'pending';
