INSERT INTO triggers (trigger_id, tenant_id, kind, spec, secret, next_nominal_at, next_fire_at)
VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7)
RETURNING *;
