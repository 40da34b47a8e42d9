SELECT (payload->>'backendSeq')::bigint
FROM events
WHERE tenant_id = $1 AND session_id = $2 AND kind = 'external.event'
  AND payload ? 'backendSeq'
ORDER BY seq DESC
LIMIT 1;
