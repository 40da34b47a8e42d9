SELECT count(*) FROM hook_subscriptions WHERE tenant_id = $1;
