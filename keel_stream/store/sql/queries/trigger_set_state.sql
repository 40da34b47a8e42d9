-- Pause or resume; a completed trigger stays completed.
UPDATE triggers
SET state = $3, next_nominal_at = $4, next_fire_at = $5, updated_at = now()
WHERE tenant_id = $1 AND trigger_id = $2 AND state <> 'completed'
RETURNING *;
