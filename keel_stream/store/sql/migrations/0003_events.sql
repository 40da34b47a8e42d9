-- The ledger. Append-only: rows are inserted by the commit transaction and never updated.
-- The kind list is the kernel's vocabulary, pinned against keel_stream.kernel.Kind by a test.
CREATE TABLE IF NOT EXISTS events (
    tenant_id      text        NOT NULL,
    session_id     text        NOT NULL,
    seq            bigint      NOT NULL CHECK (seq >= 1),
    kind           text        NOT NULL CHECK (kind IN (
                                   'user.message', 'assistant.message', 'tool.result',
                                   'compaction', 'run.finished', 'run.started', 'run.failed',
                                   'external.event')),
    payload        jsonb       NOT NULL CHECK (jsonb_typeof(payload) = 'object'),
    dedupe_key     text,
    request_digest text        NOT NULL,
    committed_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (tenant_id, session_id, seq),
    FOREIGN KEY (tenant_id, session_id) REFERENCES sessions (tenant_id, session_id)
);
