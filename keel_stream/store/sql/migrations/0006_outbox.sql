-- Events waiting to be published to Kafka, written in the commit's transaction. The relay
-- removes a row only after the broker acknowledged it, so publishing is at-least-once.
CREATE TABLE IF NOT EXISTS outbox (
    id         bigserial   PRIMARY KEY,
    tenant_id  text        NOT NULL,
    session_id text        NOT NULL,
    seq        bigint      NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (tenant_id, session_id, seq),
    FOREIGN KEY (tenant_id, session_id, seq) REFERENCES events (tenant_id, session_id, seq)
);
