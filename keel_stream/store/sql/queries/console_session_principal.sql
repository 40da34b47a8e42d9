-- (tenant, key id) of a live console sign-in whose key is still active.
SELECT k.tenant_id, k.key_id
FROM console_sessions AS s JOIN api_keys AS k ON k.key_id = s.key_id
WHERE s.token_hash = $1 AND s.revoked_at IS NULL AND s.expires_at > now()
  AND k.revoked_at IS NULL;
