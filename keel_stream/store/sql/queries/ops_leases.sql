-- The tenant's running attempts and who holds them (the console's operations page), the most
-- recently heartbeating first.
SELECT r.session_id, r.lease_owner, r.lease_epoch, r.attempts, r.lease_expires_at,
       r.heartbeat_at
FROM runs AS r
WHERE r.tenant_id = $1 AND r.status = 'running'
ORDER BY r.heartbeat_at DESC NULLS LAST, r.session_id
LIMIT $2;
