-- The events of the sessions with ($1, $2) < key <= ($3, $4), in key and seq order: a range of
-- the primary key, so a page costs the same deep in the ledger as at its start.
SELECT tenant_id, session_id, seq, kind, payload, committed_at
FROM events
WHERE (tenant_id, session_id) > ($1::text, $2::text)
  AND (tenant_id, session_id) <= ($3::text, $4::text)
ORDER BY tenant_id, session_id, seq;
