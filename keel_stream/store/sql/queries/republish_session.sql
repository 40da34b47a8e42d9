-- Re-enqueue a session's events (seq > $3) for the relay. The session row lock keeps concurrent
-- commits of this session out while its rows take their outbox ids, so ids follow seq.
WITH locked AS (
    SELECT tenant_id, session_id
    FROM sessions
    WHERE tenant_id = $1 AND session_id = $2
    FOR UPDATE
), inserted AS (
    INSERT INTO outbox (tenant_id, session_id, seq)
    SELECT e.tenant_id, e.session_id, e.seq
    FROM events AS e
    JOIN locked USING (tenant_id, session_id)
    WHERE e.seq > $3
    ORDER BY e.seq
    ON CONFLICT (tenant_id, session_id, seq) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM inserted;
