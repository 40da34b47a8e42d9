SELECT tenant_id, session_id, external_backend, external_ref, external_status, metering
FROM sessions
WHERE state_owner = 'external' AND external_status <> 'closed'
  AND ($1::text IS NULL OR external_backend = $1)
ORDER BY tenant_id, session_id;
