-- The API keys of one tenant (or of all), newest first; revoked ones only when asked for.
SELECT key_id, tenant_id, created_at, revoked_at
FROM api_keys
WHERE ($1::text IS NULL OR tenant_id = $1) AND ($2::boolean OR revoked_at IS NULL)
ORDER BY tenant_id, created_at DESC, key_id;
