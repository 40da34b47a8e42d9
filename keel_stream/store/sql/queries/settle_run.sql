-- Settle under the lease. Input committed while the attempt was finishing (after the worker
-- read the log) set pending_input: a "done" then becomes "pending", so that input is answered.
UPDATE runs
SET status = CASE WHEN $5 = 'done' AND pending_input THEN 'pending' ELSE $5 END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    read_watermark = GREATEST(read_watermark, $6),
    pending_input = false,
    cancel_requested = false,
    updated_at = now()
WHERE tenant_id = $1 AND session_id = $2 AND lease_owner = $3 AND lease_epoch = $4
RETURNING status;
