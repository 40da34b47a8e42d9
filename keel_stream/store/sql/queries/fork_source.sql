-- The source of a fork: its head and whether it is external (forks copy native logs only).
SELECT last_seq, state_owner = 'external' AS external
FROM sessions
WHERE tenant_id = $1 AND session_id = $2;
