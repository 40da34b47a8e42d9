SELECT * FROM triggers WHERE tenant_id = $1 AND trigger_id > $2 ORDER BY trigger_id LIMIT $3;
