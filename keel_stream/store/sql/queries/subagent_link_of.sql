-- The link of a child session (NULL: not a subagent).
SELECT parent_session, tool_call_id, depth, root_session
FROM subagent_links WHERE tenant_id = $1 AND child_session = $2;
