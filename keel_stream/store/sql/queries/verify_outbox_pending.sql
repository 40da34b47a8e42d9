-- Outbox rows at or below the mark ($1) still waiting for the relay, in the verified scope.
SELECT tenant_id, session_id, seq
FROM outbox
WHERE id <= $1
  AND ($2::text IS NULL OR tenant_id = $2) AND ($3::text IS NULL OR session_id = $3)
ORDER BY id;
