INSERT INTO tenants (tenant_id, name)
VALUES ($1, $2)
ON CONFLICT (tenant_id) DO NOTHING
RETURNING tenant_id;
