-- One row per (projection, generation, session): the folded state and the last seq applied.
-- A record at or below last_seq is a no-op, which makes every redelivery harmless.
CREATE TABLE IF NOT EXISTS projection_states (
    projection text        NOT NULL,
    generation integer     NOT NULL,
    tenant_id  text        NOT NULL,
    session_id text        NOT NULL,
    last_seq   bigint      NOT NULL CHECK (last_seq >= 0),
    state      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (projection, generation, tenant_id, session_id),
    FOREIGN KEY (projection, generation) REFERENCES projection_generations (projection, generation)
);
