INSERT INTO api_keys (key_id, tenant_id, key_hash) VALUES ($1, $2, $3);
