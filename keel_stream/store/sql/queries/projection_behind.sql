-- Recently committed sessions (last commit within $5 s: an index range on last_committed_at)
-- whose ledger head is ahead of the projection and that have been idle for $3 s (a busy session
-- is left to the stream, which would otherwise race the reconciler). Sessions committed longer
-- ago are checked by the reconcile's rolling sweep (projection_behind_range.sql). The state and
-- the head event are looked up per candidate (subqueries), never by walking the projection.
SELECT c.tenant_id, c.session_id, c.head, c.applied
FROM (
    SELECT s.tenant_id, s.session_id, s.last_seq AS head,
           coalesce((SELECT p.last_seq
                     FROM projection_states AS p
                     WHERE p.projection = $1 AND p.generation = $2
                       AND p.tenant_id = s.tenant_id AND p.session_id = s.session_id), 0)
               AS applied
    FROM sessions AS s
    WHERE s.last_committed_at >= now() - make_interval(secs => $5)
    OFFSET 0
) AS c
WHERE c.head > c.applied
  AND (SELECT e.committed_at
       FROM events AS e
       WHERE e.tenant_id = c.tenant_id AND e.session_id = c.session_id AND e.seq = c.head)
      < clock_timestamp() - make_interval(secs => $3)
ORDER BY c.tenant_id, c.session_id
LIMIT $4;
