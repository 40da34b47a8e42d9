-- Parked sessions, the longest parked first (optionally of one projection).
SELECT tenant_id, session_id, projection, generation, seq, error, attempts, parked_at,
       retry_at <= now() AS due
FROM projection_parked
WHERE $1::text IS NULL OR projection = $1
ORDER BY parked_at, tenant_id, session_id, projection
LIMIT $2;
