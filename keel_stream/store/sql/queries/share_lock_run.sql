-- FOR SHARE: a takeover (which updates the row) waits for in-flight fenced commits and every
-- later commit sees the new epoch, so no stale owner's commit can land after a takeover.
SELECT lease_owner, lease_epoch, status = 'running' AND lease_expires_at > now() AS attempt_active
FROM runs
WHERE tenant_id = $1 AND session_id = $2
FOR SHARE;
