-- The parked entries of these sessions (every projection and generation), and whether each is
-- due for another try.
SELECT tenant_id, session_id, projection, generation, seq, error, attempts, parked_at,
       retry_at <= now() AS due
FROM projection_parked
WHERE (tenant_id, session_id) IN (SELECT * FROM unnest($1::text[], $2::text[]));
