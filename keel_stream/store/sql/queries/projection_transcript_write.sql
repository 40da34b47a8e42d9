-- A batch of transcripts, in one statement: the heads (kept when a higher last_seq is stored:
-- the state never moves backwards), then, for the sessions whose head this statement advanced,
-- their new entry rows and the stored entries whose context position changed. Two writers that
-- both found no head fold the same events from the same start: the one that advances the head
-- last writes its rows over the other's.
WITH heads AS (
    INSERT INTO projection_states AS p
        (projection, generation, tenant_id, session_id, last_seq, state)
    SELECT $1, $2, t, s, l, st
    FROM unnest($3::text[], $4::text[], $5::bigint[], $6::jsonb[]) AS u(t, s, l, st)
    ON CONFLICT (projection, generation, tenant_id, session_id) DO UPDATE
    SET last_seq = EXCLUDED.last_seq, state = EXCLUDED.state, updated_at = now()
    WHERE p.last_seq < EXCLUDED.last_seq
    RETURNING p.tenant_id, p.session_id
), added AS (
    INSERT INTO transcript_entries AS e
        (generation, tenant_id, session_id, seq, position, entry)
    SELECT $2, r.t, r.s, r.q, r.p, r.e
    FROM unnest($7::text[], $8::text[], $9::bigint[], $10::bigint[], $11::json[])
        AS r(t, s, q, p, e)
    JOIN heads AS h ON h.tenant_id = r.t AND h.session_id = r.s
    ON CONFLICT (generation, tenant_id, session_id, seq) DO UPDATE
    SET position = EXCLUDED.position, entry = EXCLUDED.entry
    RETURNING 1
), moved AS (
    UPDATE transcript_entries AS e
    SET position = m.p
    FROM unnest($12::text[], $13::text[], $14::bigint[], $15::bigint[]) AS m(t, s, q, p)
    JOIN heads AS h ON h.tenant_id = m.t AND h.session_id = m.s
    WHERE e.generation = $2 AND e.tenant_id = m.t AND e.session_id = m.s AND e.seq = m.q
    RETURNING 1
)
SELECT (SELECT count(*) FROM heads) AS heads, (SELECT count(*) FROM added) AS added,
       (SELECT count(*) FROM moved) AS moved;
