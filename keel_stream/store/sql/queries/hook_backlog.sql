-- Pending deliveries of active subscriptions that are due now.
SELECT count(*)
FROM hook_deliveries d
JOIN hook_subscriptions s ON s.hook_id = d.hook_id
WHERE d.status = 'pending' AND d.next_attempt_at <= now() AND s.state = 'active';
