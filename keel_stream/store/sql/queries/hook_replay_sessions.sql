-- The tenant's sessions after a cursor, by id; $3 keeps only ids with that prefix.
SELECT session_id, state_owner FROM sessions
WHERE tenant_id = $1 AND session_id > $2 AND ($3::text IS NULL OR starts_with(session_id, $3))
ORDER BY session_id
LIMIT $4;
