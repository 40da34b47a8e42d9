-- Due again now, with a fresh attempt budget; a claim in flight is fenced out (lease_token).
UPDATE hook_deliveries
SET status = 'pending', attempts = 0, next_attempt_at = now(), lease_token = NULL,
    updated_at = now()
WHERE hook_id = $1 AND delivery_id = $2
RETURNING *;
