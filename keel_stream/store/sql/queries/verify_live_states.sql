-- The live read models (every projection) of these sessions.
SELECT p.projection, p.tenant_id, p.session_id, p.last_seq, p.state
FROM projection_generations AS g
JOIN projection_states AS p USING (projection, generation)
WHERE g.status = 'live'
  AND (p.tenant_id, p.session_id) IN (SELECT * FROM unnest($1::text[], $2::text[]));
