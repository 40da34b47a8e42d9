SELECT seq, kind, request_digest, committed_at
FROM events
WHERE tenant_id = $1 AND session_id = $2 AND dedupe_key = $3;
