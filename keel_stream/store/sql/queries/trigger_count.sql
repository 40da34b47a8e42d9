SELECT count(*) FROM triggers WHERE tenant_id = $1;
