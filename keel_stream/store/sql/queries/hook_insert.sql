INSERT INTO hook_subscriptions (hook_id, tenant_id, url, events, session_ids, session_prefix, secret)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING *;
