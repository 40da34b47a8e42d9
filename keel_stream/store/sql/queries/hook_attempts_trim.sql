-- Keep a delivery's last 20 attempts.
DELETE FROM hook_attempts
WHERE delivery_id = $1
  AND attempt_id < (
      SELECT attempt_id FROM hook_attempts WHERE delivery_id = $1
      ORDER BY attempt_id DESC OFFSET 19 LIMIT 1
  );
