INSERT INTO projection_offsets AS o (projection, generation, topic, partition, next_offset)
SELECT $1, $2, $3, p, n
FROM unnest($4::int[], $5::bigint[]) AS u(p, n)
ON CONFLICT (projection, generation, topic, partition) DO UPDATE
SET next_offset = GREATEST(o.next_offset, EXCLUDED.next_offset);
