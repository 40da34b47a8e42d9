UPDATE runs
SET status = $5,
    lease_owner = NULL,
    lease_expires_at = NULL,
    read_watermark = GREATEST(read_watermark, $6),
    pending_input = CASE WHEN $5 = 'pending' THEN pending_input ELSE false END,
    updated_at = now()
WHERE tenant_id = $1 AND session_id = $2 AND lease_owner = $3 AND lease_epoch = $4
RETURNING status;
