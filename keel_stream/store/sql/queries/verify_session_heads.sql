-- The sessions `keel-stream verify` checks (all, a tenant's, those with one id) and the head of
-- each log, in key order: the events committed when the verification started.
SELECT tenant_id, session_id, last_seq
FROM sessions
WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR session_id = $2)
ORDER BY tenant_id, session_id;
