-- A session and every session below it (breadth first, at most $3).
WITH RECURSIVE tree (session_id, depth) AS (
    SELECT $2::text, 0
    UNION
    SELECT l.child_session, t.depth + 1
    FROM subagent_links AS l JOIN tree AS t ON l.parent_session = t.session_id
    WHERE l.tenant_id = $1
)
SELECT session_id FROM tree ORDER BY depth, session_id LIMIT $3;
