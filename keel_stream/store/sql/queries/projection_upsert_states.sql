-- The last_seq guard: a state never moves backwards, whoever writes it.
INSERT INTO projection_states AS p (projection, generation, tenant_id, session_id, last_seq, state)
SELECT $1, $2, t, s, l, st
FROM unnest($3::text[], $4::text[], $5::bigint[], $6::jsonb[]) AS u(t, s, l, st)
ON CONFLICT (projection, generation, tenant_id, session_id) DO UPDATE
SET last_seq = EXCLUDED.last_seq, state = EXCLUDED.state, updated_at = now()
WHERE p.last_seq < EXCLUDED.last_seq;
