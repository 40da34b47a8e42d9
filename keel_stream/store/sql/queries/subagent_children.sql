-- A page of a session's children by id, after the cursor ($3; NULL: from the start), with their
-- run's status.
SELECT l.child_session, l.tool_call_id, l.depth, l.root_session, l.created_at,
       r.status AS run_status, s.last_seq
FROM subagent_links AS l
JOIN sessions AS s ON s.tenant_id = l.tenant_id AND s.session_id = l.child_session
LEFT JOIN runs AS r ON r.tenant_id = l.tenant_id AND r.session_id = l.child_session
WHERE l.tenant_id = $1 AND l.parent_session = $2 AND l.child_session > coalesce($3::text, '')
ORDER BY l.child_session
LIMIT $4;
