SELECT seq, kind, payload, committed_at, metadata
FROM events
WHERE tenant_id = $1 AND session_id = $2 AND seq > $3
ORDER BY seq
LIMIT $4;
