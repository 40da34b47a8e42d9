UPDATE runs
SET cancel_requested = true, updated_at = now()
WHERE tenant_id = $1 AND session_id = $2 AND status = 'running'
RETURNING lease_epoch;
