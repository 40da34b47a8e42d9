UPDATE runs
SET lease_expires_at = now() + make_interval(secs => $5), heartbeat_at = now()
WHERE tenant_id = $1 AND session_id = $2 AND lease_owner = $3 AND lease_epoch = $4
  AND status = 'running'
RETURNING cancel_requested;
