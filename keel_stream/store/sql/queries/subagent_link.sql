-- Link a child to its parent while its tree ($6) holds fewer than $7 subagents; true when the
-- child is linked, now or before (a takeover repeats the call: its child keeps its place even
-- in a full tree). Runs after subagent_tree_lock in the same transaction, so the count sees
-- every link of the tree committed before it and two calls never both take the last place.
WITH added AS (
    INSERT INTO subagent_links (tenant_id, child_session, parent_session, tool_call_id, depth,
                                root_session)
    SELECT $1, $2, $3, $4, $5, $6
    WHERE (SELECT count(*) FROM subagent_links WHERE tenant_id = $1 AND root_session = $6) < $7
    ON CONFLICT (tenant_id, child_session) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM added)
    OR EXISTS (SELECT 1 FROM subagent_links WHERE tenant_id = $1 AND child_session = $2);
