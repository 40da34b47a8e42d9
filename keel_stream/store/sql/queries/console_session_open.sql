-- Open a console sign-in for an active key: the key's id, or no row for an unknown/revoked key.
-- Expired sign-ins are swept here, so the table holds only live and recently ended ones.
WITH swept AS (
    DELETE FROM console_sessions WHERE expires_at < now() - interval '1 day'
), k AS (
    SELECT key_id, tenant_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL
)
INSERT INTO console_sessions (token_hash, key_id, expires_at)
SELECT $2, k.key_id, now() + make_interval(secs => $3) FROM k
RETURNING key_id;
