-- The workers holding leases now (any tenant): how many each holds and its latest heartbeat.
-- Only ids and counts leave this query, never another tenant's sessions.
SELECT r.lease_owner AS owner, count(*)::bigint AS leases, max(r.heartbeat_at) AS heartbeat_at
FROM runs AS r
WHERE r.status = 'running' AND r.lease_owner IS NOT NULL
GROUP BY r.lease_owner
ORDER BY r.lease_owner
LIMIT $1;
