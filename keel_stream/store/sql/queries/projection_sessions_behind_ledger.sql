SELECT count(*)
FROM sessions AS s
LEFT JOIN projection_states AS p
  ON p.projection = $1 AND p.generation = $2
 AND p.tenant_id = s.tenant_id AND p.session_id = s.session_id
WHERE s.last_seq > coalesce(p.last_seq, 0);
