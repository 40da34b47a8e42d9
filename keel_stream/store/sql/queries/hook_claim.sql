-- Due rows of active subscriptions, each to one sender: SKIP LOCKED lets senders share the
-- queue, and the claim moves next_attempt_at past the attempt's lease ($3 seconds), so the row
-- of a sender that died is due again once that has passed.
WITH due AS (
    SELECT d.delivery_id
    FROM hook_deliveries d
    JOIN hook_subscriptions s ON s.hook_id = d.hook_id
    WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND s.state = 'active'
    ORDER BY d.next_attempt_at
    LIMIT $1
    FOR UPDATE OF d SKIP LOCKED
)
UPDATE hook_deliveries d
SET attempts = d.attempts + 1, lease_token = $2,
    next_attempt_at = now() + make_interval(secs => $3), updated_at = now()
FROM due, hook_subscriptions s
WHERE d.delivery_id = due.delivery_id AND s.hook_id = d.hook_id
RETURNING d.delivery_id, d.hook_id, d.tenant_id, d.webhook_id, d.body, d.attempts, s.url,
          s.secret, CASE WHEN s.previous_until > now() THEN s.previous_secret END AS previous;
