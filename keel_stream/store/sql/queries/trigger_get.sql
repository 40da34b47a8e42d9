SELECT * FROM triggers WHERE tenant_id = $1 AND trigger_id = $2;
