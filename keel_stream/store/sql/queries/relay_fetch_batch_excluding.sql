-- The oldest unpublished events of this shard ($3 of $2), in outbox order, past the rows in $4
-- (outbox ids), after deleting the rows in $5. Per session, outbox ids follow seq (both are
-- assigned under the session row lock), so publishing in id order keeps each session's events in
-- seq order. No cursor is kept: rows leave the table only once acknowledged.
-- $4 holds the rows this relay has handed to the broker and not deleted yet: those awaiting their
-- acknowledgements or their delete, and those acknowledged ($5, deleted here: the query reads the
-- outbox as it was before the delete). Per session the result follows the excluded rows, which
-- were its oldest. NOT IN a subquery runs as a hashed subplan, one probe per row passed over;
-- with $4 and $5 empty this is the plain oldest-first fetch.
-- One shard: the outbox by id. Several: a shard is a set of tenants, so the tenants with a
-- backlog are found one index probe each (a skip scan over outbox_tenant), and each of this
-- shard's tenants gives its oldest $1 rows by (tenant_id, id); the other shards' backlog is never
-- read, whatever its size.
WITH RECURSIVE deleted AS (
    DELETE FROM outbox WHERE id = ANY($5::bigint[])
), tenants AS (
    (SELECT o.tenant_id FROM outbox AS o WHERE $2::int > 1 ORDER BY o.tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT o.tenant_id
            FROM outbox AS o
            WHERE o.tenant_id > t.tenant_id
            ORDER BY o.tenant_id
            LIMIT 1)
    FROM tenants AS t
    WHERE t.tenant_id IS NOT NULL
), batch AS (
    (SELECT o.id, o.tenant_id, o.session_id, o.seq
     FROM outbox AS o
     WHERE $2::int = 1
       AND o.id NOT IN (SELECT unnest($4::bigint[]))
     ORDER BY o.id
     LIMIT $1)
    UNION ALL
    (SELECT o.id, o.tenant_id, o.session_id, o.seq
     FROM tenants AS t
     CROSS JOIN LATERAL (
         SELECT b.id, b.tenant_id, b.session_id, b.seq
         FROM outbox AS b
         WHERE b.tenant_id = t.tenant_id
           AND b.id NOT IN (SELECT unnest($4::bigint[]))
         ORDER BY b.id
         LIMIT $1
     ) AS o
     WHERE $2::int > 1
       AND t.tenant_id IS NOT NULL
       AND (hashtext(t.tenant_id)::bigint & 2147483647) % $2::int = $3::int
     ORDER BY o.id
     LIMIT $1)
)
SELECT b.id, b.tenant_id, b.session_id, b.seq, e.kind, e.payload, e.committed_at, e.metadata
FROM batch AS b
CROSS JOIN LATERAL (
    -- One primary-key lookup per row (LIMIT keeps the planner from hashing the whole ledger).
    SELECT v.kind, v.payload, v.committed_at, v.metadata
    FROM events AS v
    WHERE v.tenant_id = b.tenant_id AND v.session_id = b.session_id AND v.seq = b.seq
    LIMIT 1
) AS e
ORDER BY b.id;
