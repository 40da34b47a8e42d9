-- Console sign-ins: a random token per sign-in, stored hashed, bound to the API key it was
-- opened with (a revoked key ends it), with an expiry, revoked at sign-out.
CREATE TABLE IF NOT EXISTS console_sessions (
    token_hash  text        PRIMARY KEY,
    key_id      text        NOT NULL REFERENCES api_keys (key_id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
CREATE INDEX IF NOT EXISTS console_sessions_expiry ON console_sessions (expires_at);
