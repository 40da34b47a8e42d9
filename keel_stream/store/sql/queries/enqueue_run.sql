-- A committed input makes its (native) session owe a run: pending, or, when an attempt is
-- running, pending_input so the attempt settles as pending (moreInput). A run that had ended
-- starts a fresh attempt budget.
INSERT INTO runs (tenant_id, session_id, status, pending_input)
VALUES ($1, $2, 'pending', true)
ON CONFLICT (tenant_id, session_id) DO UPDATE
SET pending_input = true,
    attempts = CASE WHEN runs.status IN ('done', 'failed') THEN 0 ELSE runs.attempts END,
    status = CASE WHEN runs.status = 'running' THEN 'running' ELSE 'pending' END,
    updated_at = now();
