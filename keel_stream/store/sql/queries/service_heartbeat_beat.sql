-- One beat of a service ($1 kind, $2 instance, $3 its interval in seconds): its row's
-- heartbeat_at becomes the database's now. Rows stale for over $4 seconds (processes killed long
-- ago) are pruned on the way.
WITH pruned AS (
    DELETE FROM service_heartbeats
    WHERE heartbeat_at < now() - make_interval(secs => $4) AND (kind, instance) <> ($1, $2)
)
INSERT INTO service_heartbeats (kind, instance, interval_s)
VALUES ($1, $2, $3)
ON CONFLICT (kind, instance) DO UPDATE SET heartbeat_at = now(), interval_s = EXCLUDED.interval_s;
