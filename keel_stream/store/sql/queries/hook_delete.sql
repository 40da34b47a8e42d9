DELETE FROM hook_subscriptions WHERE tenant_id = $1 AND hook_id = $2 RETURNING hook_id;
