SELECT version, document, created_at
FROM tenant_configs
WHERE tenant_id = $1
ORDER BY version DESC
LIMIT 1;
