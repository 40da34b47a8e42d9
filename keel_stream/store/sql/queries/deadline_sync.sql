-- The session's open decisions are exactly $3 (expiring at $4, answered on expiry with $5): new
-- ones are recorded (one already recorded is left as it is), the others are closed (answered).
WITH closed AS (
    UPDATE decision_deadlines
    SET closed = true, lease_owner = NULL, lease_until = NULL
    WHERE tenant_id = $1 AND session_id = $2 AND NOT closed
      AND NOT (decision_id = ANY ($3::text[]))
)
INSERT INTO decision_deadlines (tenant_id, session_id, decision_id, expires_at, on_expire)
SELECT $1, $2, d.id, d.expires_at, d.on_expire
FROM unnest($3::text[], $4::timestamptz[], $5::text[]) AS d (id, expires_at, on_expire)
ON CONFLICT (tenant_id, session_id, decision_id) DO NOTHING;
