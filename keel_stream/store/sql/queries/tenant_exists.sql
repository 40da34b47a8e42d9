SELECT EXISTS (SELECT 1 FROM tenants WHERE tenant_id = $1);
