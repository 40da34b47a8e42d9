-- Sessions where the new generation is behind the old one (or the ledger, with $4 = true).
SELECT s.tenant_id, s.session_id,
       coalesce(n.last_seq, 0) AS applied,
       CASE WHEN $4 THEN s.last_seq ELSE coalesce(o.last_seq, 0) END AS target
FROM sessions AS s
LEFT JOIN projection_states AS o
  ON o.projection = $1 AND o.generation = $2
 AND o.tenant_id = s.tenant_id AND o.session_id = s.session_id
LEFT JOIN projection_states AS n
  ON n.projection = $1 AND n.generation = $3
 AND n.tenant_id = s.tenant_id AND n.session_id = s.session_id
WHERE coalesce(n.last_seq, 0) < CASE WHEN $4 THEN s.last_seq ELSE coalesce(o.last_seq, 0) END
ORDER BY s.tenant_id, s.session_id;
