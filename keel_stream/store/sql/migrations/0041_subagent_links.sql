-- Subagents: a child session per `delegate` call (keel_stream.kernel.subagents). A link names the
-- child's parent, the call it answers, its depth and its tree's root; written (idempotently)
-- before the child session is created, so a takeover that re-creates the child writes the same
-- row. A cancel asked of a session reaches every session below it through these links.
CREATE TABLE IF NOT EXISTS subagent_links (
    tenant_id     text        NOT NULL,
    child_session text        NOT NULL,
    parent_session text       NOT NULL,
    tool_call_id  text        NOT NULL,
    depth         int         NOT NULL CHECK (depth >= 1),
    root_session  text        NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, child_session)
);

CREATE INDEX IF NOT EXISTS subagent_links_children
    ON subagent_links (tenant_id, parent_session, child_session);
CREATE INDEX IF NOT EXISTS subagent_links_tree ON subagent_links (tenant_id, root_session);
