SELECT p.last_seq, p.state
FROM projection_generations AS g
JOIN projection_states AS p USING (projection, generation)
WHERE g.status = 'live' AND g.projection = $1 AND p.tenant_id = $2 AND p.session_id = $3;
