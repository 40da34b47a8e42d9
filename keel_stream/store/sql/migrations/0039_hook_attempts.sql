-- Each attempt of a delivery (bounded: completing an attempt trims a delivery's log to its
-- last 20), for the deliveries log.
CREATE TABLE IF NOT EXISTS hook_attempts (
    delivery_id   bigint      NOT NULL REFERENCES hook_deliveries (delivery_id) ON DELETE CASCADE,
    attempt_id    bigint      GENERATED ALWAYS AS IDENTITY,
    attempt       integer     NOT NULL,
    attempted_at  timestamptz NOT NULL DEFAULT now(),
    status_code   integer,
    error         text,
    duration_ms   integer     NOT NULL,
    PRIMARY KEY (delivery_id, attempt_id)
);
