-- The tool calls these results pair with, from the stored entries: per (tenant, session, call
-- id), the name in the latest assistant entry that made the call (as the fold's calls map: the
-- last call of an id wins). Walks a session's entries from the newest, which is where the call
-- of a result almost always is.
SELECT u.t AS tenant_id, u.s AS session_id, u.c AS call_id, found.name
FROM unnest($2::text[], $3::text[], $4::text[]) AS u(t, s, c)
CROSS JOIN LATERAL (
    SELECT b.block->>'name' AS name
    FROM transcript_entries AS e
    CROSS JOIN LATERAL json_array_elements(
        CASE WHEN json_typeof(e.entry->'content') = 'array' THEN e.entry->'content'
             ELSE '[]'::json END) WITH ORDINALITY AS b(block, n)
    WHERE e.generation = $1 AND e.tenant_id = u.t AND e.session_id = u.s
      AND e.entry->>'kind' = 'assistant.message'
      AND b.block->>'type' = 'toolCall' AND b.block->>'id' = u.c
    ORDER BY e.seq DESC, b.n DESC
    LIMIT 1
) AS found;
