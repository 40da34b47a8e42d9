-- Decision deadlines: an index of the open decisions' expiry times, for the expiry sweeper. The
-- log is the truth (a decision is the approval on a committed tool call, answered by a
-- user.message); a row here only says when to look. Rows are written when an attempt settles
-- with decisions open (idempotently: a takeover writes the same rows), closed once the decision
-- is answered, and leased per row by the sweeper that handles them.
CREATE TABLE IF NOT EXISTS decision_deadlines (
    tenant_id    text        NOT NULL,
    session_id   text        NOT NULL,
    decision_id  text        NOT NULL,
    expires_at   timestamptz NOT NULL,
    on_expire    text        NOT NULL CHECK (on_expire IN ('reject', 'cancel')),
    closed       boolean     NOT NULL DEFAULT false,
    lease_owner  text,
    lease_until  timestamptz,
    PRIMARY KEY (tenant_id, session_id, decision_id)
);

CREATE INDEX IF NOT EXISTS decision_deadlines_due
    ON decision_deadlines (expires_at) WHERE NOT closed;
