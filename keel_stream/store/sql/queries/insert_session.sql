INSERT INTO sessions (tenant_id, session_id, state_owner, external_backend, external_ref,
                      external_status, metering)
SELECT t.tenant_id, $2, $3, $4, $5, $6, $7
FROM tenants AS t
WHERE t.tenant_id = $1
ON CONFLICT (tenant_id, session_id) DO NOTHING
RETURNING session_id;
