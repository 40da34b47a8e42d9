-- The hooks dispatcher's fold of each session (keel_stream.hooks.derive) and the last seq it
-- applied: a record at or below it is a duplicate, and one more than one past it means a gap,
-- read from the ledger. Written in the same transaction as the deliveries the fold produced.
CREATE TABLE IF NOT EXISTS hook_folds (
    tenant_id   text        NOT NULL,
    session_id  text        NOT NULL,
    last_seq    bigint      NOT NULL DEFAULT 0,
    state       jsonb       NOT NULL DEFAULT '{}',
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id)
);
