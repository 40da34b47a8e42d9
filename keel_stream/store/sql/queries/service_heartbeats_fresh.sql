-- The services running now: per kind, the rows whose last beat is within $1 of their own
-- intervals of the database's now.
SELECT kind, count(*) AS instances
FROM service_heartbeats
WHERE heartbeat_at > now() - make_interval(secs => interval_s * $1)
GROUP BY kind;
