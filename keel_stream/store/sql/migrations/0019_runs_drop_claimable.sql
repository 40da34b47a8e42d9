-- keel:no-transaction
-- Superseded by runs_pending (0017) and runs_lease_expiry (0018): it held every running row,
-- so a claim walked all the live leases.
DROP INDEX CONCURRENTLY IF EXISTS runs_claimable;
