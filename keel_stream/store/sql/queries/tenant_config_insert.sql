INSERT INTO tenant_configs (tenant_id, version, document)
SELECT $1, COALESCE(MAX(version), 0) + 1, $2::jsonb
FROM tenant_configs
WHERE tenant_id = $1
RETURNING version;
