-- The migration ledger: one row per applied migration file, with its checksum, so a re-run
-- applies only what is new and an edited, already-applied file is detected (drift).
CREATE TABLE IF NOT EXISTS keel_schema_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
