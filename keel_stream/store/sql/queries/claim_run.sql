-- Claim one run: a pending one, or a running one whose lease expired (a takeover). SKIP LOCKED
-- lets workers claim concurrently; the epoch increases on every claim, which fences the previous
-- owner. External sessions are filtered here (fail-closed): even a dirty run row is never claimed.
-- A pending claim starts an attempt (attempts + 1). A takeover does not: the new owner first
-- settles the attempt that died (taken_over), then starts the next one if the policy allows.
UPDATE runs AS r
SET status = 'running',
    lease_owner = $1,
    lease_epoch = r.lease_epoch + 1,
    lease_expires_at = now() + make_interval(secs => $2),
    heartbeat_at = now(),
    attempts = CASE WHEN claimed.status = 'running' THEN r.attempts ELSE r.attempts + 1 END,
    -- A cancel asked of an attempt that died is still meant for the run: a takeover keeps it.
    cancel_requested = CASE WHEN claimed.status = 'running' THEN r.cancel_requested ELSE false END,
    updated_at = now()
FROM (
    SELECT c.tenant_id, c.session_id, c.status
    FROM runs AS c
    JOIN sessions AS s USING (tenant_id, session_id)
    WHERE s.state_owner <> 'external'
      AND (c.status = 'pending' OR (c.status = 'running' AND c.lease_expires_at < now()))
    ORDER BY c.updated_at
    LIMIT 1
    FOR UPDATE OF c SKIP LOCKED
) AS claimed
WHERE r.tenant_id = claimed.tenant_id AND r.session_id = claimed.session_id
RETURNING r.tenant_id, r.session_id, r.lease_epoch, r.attempts, r.max_attempts,
          r.read_watermark, r.cancel_requested, claimed.status = 'running' AS taken_over;
