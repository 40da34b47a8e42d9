-- A key already recorded (a racing replica, a redelivered webhook) inserts nothing.
INSERT INTO trigger_firings (trigger_id, tenant_id, fire_key, nominal_at, actual_at, decision,
                             reason, delivery, session_id, message, detail, outcome, planned_by,
                             finished_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11::jsonb, $12, $13,
        CASE WHEN $12::text IS NULL THEN NULL ELSE now() END)
ON CONFLICT (trigger_id, fire_key) DO NOTHING
RETURNING *;
