SELECT tenant_id, session_id
FROM sessions
WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::text IS NULL OR session_id = $2)
ORDER BY tenant_id, session_id;
