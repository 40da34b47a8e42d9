SELECT count(*) AS events,
       coalesce(extract(epoch FROM clock_timestamp() - min(created_at)), 0)::float8 AS oldest_s
FROM outbox
WHERE $1::int = 1 OR (hashtext(tenant_id)::bigint & 2147483647) % $1::int = $2::int;
