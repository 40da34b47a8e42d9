-- A draining worker hands its attempt back unfinished: pending again, the attempt not counted.
UPDATE runs
SET status = 'pending',
    lease_owner = NULL,
    lease_expires_at = NULL,
    attempts = GREATEST(attempts - 1, 0),
    updated_at = now()
WHERE tenant_id = $1 AND session_id = $2 AND lease_owner = $3 AND lease_epoch = $4
RETURNING status;
