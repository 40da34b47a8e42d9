UPDATE triggers
SET next_nominal_at = $2, next_fire_at = $3, fires = $4, state = $5, updated_at = now()
WHERE trigger_id = $1;
