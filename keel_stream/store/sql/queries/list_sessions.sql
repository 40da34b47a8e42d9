-- A page of the tenant's sessions by id, after the cursor ($2; NULL: from the start). The cursor
-- is an index condition on the primary key (every id sorts after ''), so a page deep in the list
-- costs what the first one does; the run row is looked up for the page's rows only. The columns
-- are get_session's (open decisions from the deadlines index, keel_stream.store.deadlines): a
-- listed session looks as it does on its own. $4 keeps the sessions whose
-- run has that status ('none': no run), $5 those of that state owner (keel, external); NULL: any.
-- A filter is applied to the rows the cursor walks, so a rare status may walk many sessions.
SELECT s.session_id, s.last_seq, s.state_owner, s.external_backend, s.external_ref,
       s.external_status, s.metering, s.created_at,
       r.status AS run_status, r.attempts, r.lease_epoch, s.forked_from, s.forked_at_seq,
       ARRAY(SELECT d.decision_id FROM decision_deadlines AS d
             WHERE d.tenant_id = s.tenant_id AND d.session_id = s.session_id AND NOT d.closed
             ORDER BY d.decision_id) AS open_decisions,
       l.parent_session, l.tool_call_id AS parent_call, l.depth AS subagent_depth,
       l.root_session
FROM sessions AS s
LEFT JOIN LATERAL (
    SELECT status, attempts, lease_epoch
    FROM runs
    WHERE runs.tenant_id = s.tenant_id AND runs.session_id = s.session_id
    LIMIT 1  -- keeps the lookup per row: a plain join would be planned over all of runs
) AS r ON true
LEFT JOIN subagent_links AS l
    ON l.tenant_id = s.tenant_id AND l.child_session = s.session_id
WHERE s.tenant_id = $1 AND s.session_id > coalesce($2::text, '')
  AND ($4::text IS NULL OR coalesce(r.status, 'none') = $4::text)
  AND ($5::text IS NULL OR s.state_owner = $5::text)
ORDER BY s.session_id
LIMIT $3;
