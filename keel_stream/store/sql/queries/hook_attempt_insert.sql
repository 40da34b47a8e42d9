INSERT INTO hook_attempts (delivery_id, attempt, status_code, error, duration_ms)
VALUES ($1, $2, $3, $4, $5);
