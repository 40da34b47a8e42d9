UPDATE console_sessions SET revoked_at = now() WHERE token_hash = $1 AND revoked_at IS NULL;
