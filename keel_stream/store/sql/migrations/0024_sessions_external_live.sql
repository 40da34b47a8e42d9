-- keel:no-transaction
-- The external gateway recounts and resumes the live external sessions of each backend at start.
DROP INDEX CONCURRENTLY IF EXISTS sessions_external_live;
CREATE INDEX CONCURRENTLY sessions_external_live ON sessions (external_backend, tenant_id)
    WHERE state_owner = 'external' AND external_status <> 'closed';
