-- POST /run: ask for a run without new input (a native session only; the API checks first and
-- the claim predicate filters external sessions anyway).
INSERT INTO runs (tenant_id, session_id, status)
SELECT s.tenant_id, s.session_id, 'pending'
FROM sessions AS s
WHERE s.tenant_id = $1 AND s.session_id = $2 AND s.state_owner <> 'external'
ON CONFLICT (tenant_id, session_id) DO UPDATE
SET status = CASE WHEN runs.status = 'running' THEN 'running' ELSE 'pending' END,
    attempts = CASE WHEN runs.status IN ('done', 'failed') THEN 0 ELSE runs.attempts END,
    updated_at = now()
RETURNING status;
