DELETE FROM triggers WHERE tenant_id = $1 AND trigger_id = $2 RETURNING trigger_id;
