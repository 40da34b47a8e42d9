-- API keys, stored as SHA-256 hashes of the secret (a key is shown once, at creation).
CREATE TABLE IF NOT EXISTS api_keys (
    key_id     text        PRIMARY KEY,
    tenant_id  text        NOT NULL REFERENCES tenants (tenant_id),
    key_hash   text        NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);
