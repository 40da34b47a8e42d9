-- This shard's backlog ($2 of $1): its size and the age of its oldest row, summed over the
-- shard's tenants that have a backlog (found as in relay_fetch_batch_excluding.sql), so the other shards'
-- rows are never read.
WITH RECURSIVE tenants AS (
    (SELECT o.tenant_id FROM outbox AS o ORDER BY o.tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT o.tenant_id
            FROM outbox AS o
            WHERE o.tenant_id > t.tenant_id
            ORDER BY o.tenant_id
            LIMIT 1)
    FROM tenants AS t
    WHERE t.tenant_id IS NOT NULL
)
SELECT coalesce(sum(p.events), 0)::bigint AS events,
       coalesce(extract(epoch FROM clock_timestamp() - min(p.oldest)), 0)::float8 AS oldest_s
FROM tenants AS t
CROSS JOIN LATERAL (
    SELECT count(*) AS events, min(b.created_at) AS oldest
    FROM outbox AS b
    WHERE b.tenant_id = t.tenant_id
) AS p
WHERE t.tenant_id IS NOT NULL
  AND ($1::int = 1 OR (hashtext(t.tenant_id)::bigint & 2147483647) % $1::int = $2::int);
