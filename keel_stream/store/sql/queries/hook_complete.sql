-- Only the claim that holds the row completes it (a redelivery or replay in between reset it).
UPDATE hook_deliveries
SET status = $3,
    next_attempt_at = now() + make_interval(secs => $4),
    lease_token = NULL,
    last_status = $5,
    last_error = $6,
    updated_at = now(),
    delivered_at = CASE WHEN $3 = 'delivered' THEN now() ELSE delivered_at END
WHERE delivery_id = $1 AND lease_token = $2
RETURNING attempts;
