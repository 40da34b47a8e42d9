-- Link a child to its parent; a second write of the same child changes nothing.
INSERT INTO subagent_links (tenant_id, child_session, parent_session, tool_call_id, depth,
                            root_session)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (tenant_id, child_session) DO NOTHING;
