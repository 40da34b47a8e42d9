-- The rolling sweep's share of projection_behind.sql: the sessions with keys in
-- ($5, $6) < key <= ($7, $8), whenever they last committed, whose ledger head is ahead of the
-- projection and that have been idle for $3 s. The sessions and the projection's states are
-- both read as that key range of their primary keys; only the head events of the sessions
-- behind are looked up (OFFSET 0 keeps that lookup out of the scan).
SELECT b.tenant_id, b.session_id, b.head, b.applied
FROM (
    SELECT s.tenant_id, s.session_id, s.last_seq AS head, coalesce(p.last_seq, 0) AS applied
    FROM sessions AS s
    LEFT JOIN projection_states AS p
      ON p.projection = $1 AND p.generation = $2
     AND p.tenant_id = s.tenant_id AND p.session_id = s.session_id
     AND (p.tenant_id, p.session_id) > ($5::text, $6::text)
     AND (p.tenant_id, p.session_id) <= ($7::text, $8::text)
    WHERE (s.tenant_id, s.session_id) > ($5::text, $6::text)
      AND (s.tenant_id, s.session_id) <= ($7::text, $8::text)
      AND s.last_seq > coalesce(p.last_seq, 0)
    OFFSET 0
) AS b
WHERE (SELECT e.committed_at
       FROM events AS e
       WHERE e.tenant_id = b.tenant_id AND e.session_id = b.session_id AND e.seq = b.head)
      < clock_timestamp() - make_interval(secs => $3)
ORDER BY b.tenant_id, b.session_id
LIMIT $4;
