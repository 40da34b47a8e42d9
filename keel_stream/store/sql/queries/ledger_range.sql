SELECT seq, kind, payload, committed_at
FROM events
WHERE tenant_id = $1 AND session_id = $2 AND seq > $3 AND seq <= $4
ORDER BY seq;
