SELECT status, attempts, max_attempts, lease_owner, lease_epoch, lease_expires_at,
       pending_input, read_watermark, cancel_requested
FROM runs
WHERE tenant_id = $1 AND session_id = $2;
