-- Claim one run: a running one whose lease expired (a takeover), else a pending one. Two probes,
-- each an index range of claimable rows only (runs_lease_expiry, runs_pending_by_tenant), so the
-- healthy leases are never walked; the pending probe runs only when no expired lease was taken.
-- SKIP LOCKED lets workers claim concurrently; the epoch increases on every claim, which fences
-- the previous owner. External sessions are filtered here (fail-closed): even a dirty run row is
-- never claimed. A pending claim starts an attempt (attempts + 1). A takeover does not: the new
-- owner first settles the attempt that died (taken_over), then starts the next one if the policy
-- allows. cancel_requested is left as it is: a cancel asked of an attempt that died, or of a run
-- not claimed yet (a subagent tree cancelled), is meant for the attempt that claims it; settling
-- clears it. A pending run whose not_before has not come yet waits (the model server asked the
-- attempt that settled it to wait: Retry-After); a takeover's run never has one (it is running).
-- Fairness: $3 names tenants the claiming worker already runs its share of (skipped by both
-- probes); $4 caps running attempts per tenant across all workers (0: no cap). Pending runs of the
-- tenants with the fewest running attempts go first, oldest first among equals: one tenant's
-- backlog never queues another tenant's input behind it.
-- Cost: the probe ranks tenants, not pending runs. `waiting` skips from one tenant with pending
-- runs to the next (runs_pending_by_tenant, one index probe per tenant); each tenant's running
-- attempts are counted once (runs_running_by_tenant) and its oldest claimable pending run read
-- once, so a tenant with a deep backlog costs what a tenant with one pending run costs. The
-- ranked tenants are tried in order and the first one with an unlocked run wins (LIMIT 1 stops
-- the lateral pick early, so only that run is locked).
UPDATE runs AS r
SET status = 'running',
    lease_owner = $1,
    lease_epoch = r.lease_epoch + 1,
    lease_expires_at = now() + make_interval(secs => $2),
    heartbeat_at = now(),
    attempts = CASE WHEN claimed.status = 'running' THEN r.attempts ELSE r.attempts + 1 END,
    updated_at = now()
FROM (
    SELECT * FROM (
        SELECT c.tenant_id, c.session_id, c.status
        FROM runs AS c
        JOIN sessions AS s USING (tenant_id, session_id)
        WHERE c.status = 'running' AND c.lease_expires_at < now() AND s.state_owner <> 'external'
          AND NOT c.tenant_id = ANY($3::text[])
        ORDER BY c.lease_expires_at
        LIMIT 1
        FOR UPDATE OF c SKIP LOCKED
    ) AS expired
    UNION ALL
    SELECT * FROM (
        WITH RECURSIVE waiting (tenant_id) AS (
            (SELECT p.tenant_id FROM runs AS p WHERE p.status = 'pending'
             ORDER BY p.tenant_id LIMIT 1)
            UNION ALL
            SELECT (SELECT p.tenant_id FROM runs AS p
                    WHERE p.status = 'pending' AND p.tenant_id > w.tenant_id
                    ORDER BY p.tenant_id LIMIT 1)
            FROM waiting AS w WHERE w.tenant_id IS NOT NULL
        ), ranked AS (
            SELECT w.tenant_id, busy.running, oldest.updated_at
            FROM waiting AS w
            CROSS JOIN LATERAL (
                SELECT count(*) AS running FROM runs AS b
                WHERE b.tenant_id = w.tenant_id AND b.status = 'running'
            ) AS busy
            CROSS JOIN LATERAL (
                SELECT o.updated_at FROM runs AS o
                WHERE o.tenant_id = w.tenant_id AND o.status = 'pending'
                  AND (o.not_before IS NULL OR o.not_before <= now())
                ORDER BY o.updated_at LIMIT 1
            ) AS oldest
            WHERE w.tenant_id IS NOT NULL AND NOT w.tenant_id = ANY($3::text[])
              AND ($4::int = 0 OR busy.running < $4::int)
            ORDER BY busy.running, oldest.updated_at
        )
        SELECT pick.tenant_id, pick.session_id, pick.status
        FROM ranked
        CROSS JOIN LATERAL (
            SELECT c.tenant_id, c.session_id, c.status
            FROM runs AS c
            JOIN sessions AS s USING (tenant_id, session_id)
            WHERE c.tenant_id = ranked.tenant_id AND c.status = 'pending'
              AND (c.not_before IS NULL OR c.not_before <= now())
              AND s.state_owner <> 'external'
            ORDER BY c.updated_at
            LIMIT 1
            FOR UPDATE OF c SKIP LOCKED
        ) AS pick
        LIMIT 1
    ) AS pending
    LIMIT 1
) AS claimed
WHERE r.tenant_id = claimed.tenant_id AND r.session_id = claimed.session_id
RETURNING r.tenant_id, r.session_id, r.lease_epoch, r.attempts, r.max_attempts,
          r.read_watermark, r.cancel_requested, claimed.status = 'running' AS taken_over;
