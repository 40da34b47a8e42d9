-- The oldest unpublished events of this shard, in outbox order. Per session, outbox ids follow
-- seq (both are assigned under the session row lock), so publishing in id order keeps each
-- session's events in seq order. No cursor is kept: rows leave the table only once acknowledged.
SELECT o.id, o.tenant_id, o.session_id, o.seq, e.kind, e.payload, e.committed_at
FROM outbox AS o
JOIN events AS e USING (tenant_id, session_id, seq)
WHERE $2::int = 1 OR (hashtext(o.tenant_id)::bigint & 2147483647) % $2::int = $3::int
ORDER BY o.id
LIMIT $1;
