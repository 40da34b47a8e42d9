-- Claim one run: a running one whose lease expired (a takeover), else a pending one. Two probes,
-- each an index range of claimable rows only (runs_lease_expiry, runs_pending), so the healthy
-- leases are never walked; the pending probe runs only when no expired lease could be taken.
-- SKIP LOCKED lets workers claim concurrently; the epoch increases on every claim, which fences
-- the previous owner. External sessions are filtered here (fail-closed): even a dirty run row is
-- never claimed. A pending claim starts an attempt (attempts + 1). A takeover does not: the new
-- owner first settles the attempt that died (taken_over), then starts the next one if the policy
-- allows.
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
    SELECT * FROM (
        SELECT c.tenant_id, c.session_id, c.status
        FROM runs AS c
        JOIN sessions AS s USING (tenant_id, session_id)
        WHERE c.status = 'running' AND c.lease_expires_at < now() AND s.state_owner <> 'external'
        ORDER BY c.lease_expires_at
        LIMIT 1
        FOR UPDATE OF c SKIP LOCKED
    ) AS expired
    UNION ALL
    SELECT * FROM (
        SELECT c.tenant_id, c.session_id, c.status
        FROM runs AS c
        JOIN sessions AS s USING (tenant_id, session_id)
        WHERE c.status = 'pending' AND s.state_owner <> 'external'
        ORDER BY c.updated_at
        LIMIT 1
        FOR UPDATE OF c SKIP LOCKED
    ) AS pending
    LIMIT 1
) AS claimed
WHERE r.tenant_id = claimed.tenant_id AND r.session_id = claimed.session_id
RETURNING r.tenant_id, r.session_id, r.lease_epoch, r.attempts, r.max_attempts,
          r.read_watermark, r.cancel_requested, claimed.status = 'running' AS taken_over;
