-- Settle under the lease. $5 is the status policy's answer for what the attempt saw, $7 the
-- highest seq it accounted for, $8 whether the budget starts afresh (a success, or late input
-- it saw). An input committed after $7 (last_input_seq is read from the row under its lock, so
-- an input racing this statement is seen) was never presented: the session owes a run again,
-- pending with a fresh budget, whatever the attempt's outcome. $9 is the wait the model server
-- asked for when the attempt ended on its failure (Retry-After, seconds; NULL: none): the run is
-- not claimed before it has passed, by any worker (claim_run.sql).
UPDATE runs
SET status = CASE WHEN last_input_seq > $7 THEN 'pending' ELSE $5 END,
    attempts = CASE WHEN $8 OR last_input_seq > $7 THEN 0 ELSE attempts END,
    lease_owner = NULL,
    lease_expires_at = NULL,
    read_watermark = GREATEST(read_watermark, $6),
    cancel_requested = false,
    not_before = CASE WHEN $9::float8 > 0 THEN now() + make_interval(secs => $9::float8) END,
    updated_at = now()
WHERE tenant_id = $1 AND session_id = $2 AND lease_owner = $3 AND lease_epoch = $4
RETURNING status;
