CREATE TABLE IF NOT EXISTS tenants (
    tenant_id  text        PRIMARY KEY,
    name       text        NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now()
);
