-- The new secret signs from now on; the old one signs too until the grace period ends.
UPDATE hook_subscriptions
SET previous_secret = secret,
    previous_until = now() + make_interval(secs => $4),
    secret = $3,
    rotated_at = now()
WHERE tenant_id = $1 AND hook_id = $2
RETURNING *;
