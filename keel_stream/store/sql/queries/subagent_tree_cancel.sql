-- Cancel a session's running attempt and every session below it: the session's running run and
-- each descendant's pending or running run is marked (a claim keeps the mark, so a pending child
-- starts cancelled) and each running one's worker is told at
-- once on keel_cancels. Returns how many runs were marked.
WITH RECURSIVE tree (session_id) AS (
    SELECT $2::text
    UNION
    SELECT l.child_session
    FROM subagent_links AS l JOIN tree AS t ON l.parent_session = t.session_id
    WHERE l.tenant_id = $1
),
asked AS (
    UPDATE runs AS r
    SET cancel_requested = true, updated_at = now()
    FROM tree
    WHERE r.tenant_id = $1 AND r.session_id = tree.session_id
      AND (r.status = 'running' OR (r.status = 'pending' AND tree.session_id <> $2))
    RETURNING r.session_id, r.status
)
SELECT count(*) FILTER (WHERE status IN ('pending', 'running')) AS marked,
       count(pg_notify('keel_cancels', $1 || '/' || session_id))
           FILTER (WHERE status = 'running') AS told
FROM asked;
