SELECT * FROM hook_subscriptions WHERE tenant_id = $1 ORDER BY created_at, hook_id;
