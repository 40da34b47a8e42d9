SELECT tenant_id, key_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL;
