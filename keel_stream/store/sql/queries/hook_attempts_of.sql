SELECT attempt, attempted_at, status_code, error, duration_ms
FROM hook_attempts WHERE delivery_id = $1 ORDER BY attempt_id;
