SELECT payload->>'turnId'
FROM events
WHERE tenant_id = $1 AND session_id = $2 AND kind = 'external.event'
  AND payload->>'direction' = 'outbound' AND payload ? 'turnId'
ORDER BY seq DESC
LIMIT 1;
