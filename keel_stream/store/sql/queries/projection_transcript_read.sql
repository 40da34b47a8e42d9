-- Transcripts of the live generation as read models, in one statement (one snapshot): each
-- session's head, and its entries with their context positions in seq order.
SELECT p.tenant_id, p.session_id, p.last_seq, p.state,
       coalesce(r.entries, '[]'::json) AS entries,
       coalesce(r.positions, '{}'::bigint[]) AS positions
FROM projection_generations AS g
JOIN projection_states AS p USING (projection, generation)
LEFT JOIN LATERAL (
    SELECT json_agg(e.entry ORDER BY e.seq) AS entries,
           array_agg(e.position ORDER BY e.seq) AS positions
    FROM transcript_entries AS e
    WHERE e.generation = p.generation AND e.tenant_id = p.tenant_id
      AND e.session_id = p.session_id AND e.seq <= p.last_seq
) AS r ON true
WHERE g.status = 'live' AND g.projection = $1
  AND (p.tenant_id, p.session_id) IN (SELECT * FROM unnest($2::text[], $3::text[]));
