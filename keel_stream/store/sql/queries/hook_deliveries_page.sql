-- Newest first; $3 is the last delivery id of the previous page (0: from the newest).
SELECT * FROM hook_deliveries
WHERE hook_id = $1
  AND ($2::text IS NULL OR status = $2)
  AND ($3::bigint = 0 OR delivery_id < $3)
ORDER BY delivery_id DESC
LIMIT $4;
