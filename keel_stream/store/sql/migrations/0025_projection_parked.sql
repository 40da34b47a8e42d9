-- Sessions a projection could not apply: its fold raised, or PostgreSQL refused the state it
-- produced. The session's state stays at the last seq it applied (seq here is the first one it
-- could not), while the rest of its batch, its partition and the other projections go on. The
-- projector tries the session again once retry_at has passed (backing off, up to an hour), or
-- as soon as the row is deleted; it deletes the row itself when a try succeeds.
CREATE TABLE IF NOT EXISTS projection_parked (
    tenant_id  text        NOT NULL,
    session_id text        NOT NULL,
    projection text        NOT NULL,
    generation integer     NOT NULL,
    seq        bigint      NOT NULL CHECK (seq >= 1),
    error      text        NOT NULL,
    attempts   integer     NOT NULL DEFAULT 1,
    parked_at  timestamptz NOT NULL DEFAULT now(),
    failed_at  timestamptz NOT NULL DEFAULT now(),
    retry_at   timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, session_id, projection, generation),
    FOREIGN KEY (projection, generation)
        REFERENCES projection_generations (projection, generation) ON DELETE CASCADE
);
