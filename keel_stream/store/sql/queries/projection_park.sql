-- Park sessions of projections, or count one more failure of a session parked already: the next
-- try waits 30 s after the first failure, doubling up to an hour.
INSERT INTO projection_parked AS p
    (tenant_id, session_id, projection, generation, seq, error, retry_at)
SELECT t, s, pr, g, q, e, now() + interval '30 seconds'
FROM unnest($1::text[], $2::text[], $3::text[], $4::int[], $5::bigint[], $6::text[])
    AS u(t, s, pr, g, q, e)
ON CONFLICT (tenant_id, session_id, projection, generation) DO UPDATE
SET seq = EXCLUDED.seq,
    error = EXCLUDED.error,
    attempts = p.attempts + 1,
    failed_at = now(),
    retry_at = now() + least(interval '30 seconds' * power(2, least(p.attempts, 10)),
                             interval '1 hour');
