UPDATE hook_subscriptions SET state = 'disabled', disabled_reason = $2
WHERE hook_id = $1 AND state = 'active';
