-- Sessions whose ledger head is ahead of the projection and that have been idle for a while
-- (a busy session is left to the stream, which would otherwise race the reconciler).
SELECT s.tenant_id, s.session_id, s.last_seq AS head, coalesce(p.last_seq, 0) AS applied
FROM sessions AS s
JOIN events AS e
  ON e.tenant_id = s.tenant_id AND e.session_id = s.session_id AND e.seq = s.last_seq
LEFT JOIN projection_states AS p
  ON p.projection = $1 AND p.generation = $2
 AND p.tenant_id = s.tenant_id AND p.session_id = s.session_id
WHERE s.last_seq > coalesce(p.last_seq, 0)
  AND e.committed_at < clock_timestamp() - make_interval(secs => $3)
ORDER BY s.tenant_id, s.session_id
LIMIT $4;
