-- How many outbox rows at or below the mark ($1) are still waiting, in the verified scope.
SELECT count(*)
FROM outbox
WHERE id <= $1
  AND ($2::text IS NULL OR tenant_id = $2) AND ($3::text IS NULL OR session_id = $3);
