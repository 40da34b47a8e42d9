-- The stored context of these sessions (what a compaction replaces): the entries in it, in
-- context order.
SELECT tenant_id, session_id, seq, position
FROM transcript_entries
WHERE generation = $1
  AND (tenant_id, session_id) IN (SELECT * FROM unnest($2::text[], $3::text[]))
  AND position IS NOT NULL
ORDER BY tenant_id, session_id, position;
