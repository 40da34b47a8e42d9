-- keel:no-transaction
DROP INDEX CONCURRENTLY IF EXISTS sessions_last_committed;
CREATE INDEX CONCURRENTLY sessions_last_committed ON sessions (last_committed_at);
