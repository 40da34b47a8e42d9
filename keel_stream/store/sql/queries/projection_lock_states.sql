-- Locked in key order so the stream processor and the reconciler never deadlock.
SELECT tenant_id, session_id, last_seq, state
FROM projection_states
WHERE projection = $1
  AND generation = $2
  AND (tenant_id, session_id) IN (SELECT * FROM unnest($3::text[], $4::text[]))
ORDER BY tenant_id, session_id
FOR UPDATE;
