-- Due deadlines ($1 is the sweeper's now), leased to $2 until $3 seconds after the database's now;
-- a deadline another sweeper holds is passed over (SKIP LOCKED), and taken once its lease ends.
UPDATE decision_deadlines AS d
SET lease_owner = $2, lease_until = now() + make_interval(secs => $3)
FROM (
    SELECT tenant_id, session_id, decision_id
    FROM decision_deadlines
    WHERE NOT closed AND expires_at <= $1 AND (lease_until IS NULL OR lease_until < now())
    ORDER BY expires_at
    LIMIT $4
    FOR UPDATE SKIP LOCKED
) AS due
WHERE d.tenant_id = due.tenant_id AND d.session_id = due.session_id
  AND d.decision_id = due.decision_id
RETURNING d.tenant_id, d.session_id, d.decision_id, d.expires_at, d.on_expire;
