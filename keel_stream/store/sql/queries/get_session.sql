SELECT s.session_id, s.last_seq, s.state_owner, s.external_backend, s.external_ref,
       s.external_status, s.metering, s.created_at, r.status AS run_status,
       r.attempts, r.lease_epoch, s.forked_from, s.forked_at_seq,
       ARRAY(SELECT d.decision_id FROM decision_deadlines AS d
             WHERE d.tenant_id = s.tenant_id AND d.session_id = s.session_id AND NOT d.closed
             ORDER BY d.decision_id) AS open_decisions,
       l.parent_session, l.tool_call_id AS parent_call, l.depth AS subagent_depth,
       l.root_session
FROM sessions AS s
LEFT JOIN runs AS r USING (tenant_id, session_id)
LEFT JOIN subagent_links AS l
    ON l.tenant_id = s.tenant_id AND l.child_session = s.session_id
WHERE s.tenant_id = $1 AND s.session_id = $2;
