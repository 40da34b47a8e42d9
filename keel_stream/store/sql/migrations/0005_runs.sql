-- One run row per native session: its status, attempt budget and lease (owner + epoch).
-- The epoch increases on every takeover; owner-scoped commits are fenced against it.
-- pending_input and read_watermark survive a takeover so unread input is never swallowed.
CREATE TABLE IF NOT EXISTS runs (
    tenant_id        text        NOT NULL,
    session_id       text        NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'running', 'done', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts     integer     NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    lease_owner      text,
    lease_epoch      bigint      NOT NULL DEFAULT 0 CHECK (lease_epoch >= 0),
    lease_expires_at timestamptz,
    heartbeat_at     timestamptz,
    pending_input    boolean     NOT NULL DEFAULT false,
    read_watermark   bigint      NOT NULL DEFAULT 0 CHECK (read_watermark >= 0),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id),
    FOREIGN KEY (tenant_id, session_id) REFERENCES sessions (tenant_id, session_id)
);
