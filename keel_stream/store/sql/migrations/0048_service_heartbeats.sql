-- The background services that beat while they run (docs/operations.md#readiness): hooks senders
-- (`keel-stream hooks run`) and trigger schedulers (`keel-stream triggers run`), one row per
-- process. A process upserts its row every interval_s and deletes it when it stops gracefully; a
-- row is fresh while heartbeat_at is within three of its own interval_s of the database's now, so
-- the API's clock and settings play no part. A killed process's row goes stale; beats prune rows
-- stale for an hour.
CREATE TABLE IF NOT EXISTS service_heartbeats (
    kind          text             NOT NULL CHECK (kind IN ('hooks_sender', 'trigger_scheduler')),
    instance      text             NOT NULL,
    interval_s    double precision NOT NULL CHECK (interval_s > 0),
    started_at    timestamptz      NOT NULL DEFAULT now(),
    heartbeat_at  timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, instance)
);
