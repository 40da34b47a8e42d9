SELECT s.session_id, s.last_seq, s.state_owner, s.external_backend, s.external_ref,
       s.external_status, s.metering, s.created_at, r.status AS run_status
FROM sessions AS s
LEFT JOIN runs AS r USING (tenant_id, session_id)
WHERE s.tenant_id = $1 AND ($2::text IS NULL OR s.session_id > $2)
ORDER BY s.session_id
LIMIT $3;
