SELECT * FROM hook_subscriptions WHERE tenant_id = ANY($1::text[]) AND state = 'active';
