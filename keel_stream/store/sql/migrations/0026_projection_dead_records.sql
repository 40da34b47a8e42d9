-- Source records the projector could not decode as events: passed over (their events, if they
-- carried any, are in the ledger, and gap-fill and reconcile bring them in), kept here to be
-- looked at, with the first KiB of the value.
CREATE TABLE IF NOT EXISTS projection_dead_records (
    topic         text        NOT NULL,
    partition     integer     NOT NULL,
    record_offset bigint      NOT NULL,
    error         text        NOT NULL,
    value_head    bytea       NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition, record_offset)
);
