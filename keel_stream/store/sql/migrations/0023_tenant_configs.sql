-- Tenant configuration documents, versioned: every `tenants config set` adds a version.
-- Documents are validated before they are stored, so they hold secret references only.
CREATE TABLE IF NOT EXISTS tenant_configs (
    tenant_id  text        NOT NULL REFERENCES tenants (tenant_id),
    version    integer     NOT NULL CHECK (version > 0),
    document   jsonb       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, version)
);
