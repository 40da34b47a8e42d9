-- Runs under the session row lock (lock_session.sql): seq = last_seq + 1, the event, its outbox
-- row and the NOTIFY wake-up are one statement in the commit's transaction. NOTIFY is delivered
-- only when the transaction commits.
WITH advanced AS (
    UPDATE sessions
    SET last_seq = last_seq + 1
    WHERE tenant_id = $1 AND session_id = $2
    RETURNING last_seq
), inserted AS (
    INSERT INTO events (tenant_id, session_id, seq, kind, payload, dedupe_key, request_digest)
    SELECT $1, $2, advanced.last_seq, $3, $4, $5, $6
    FROM advanced
    RETURNING seq, committed_at
), queued AS (
    INSERT INTO outbox (tenant_id, session_id, seq)
    SELECT $1, $2, inserted.seq
    FROM inserted
)
SELECT inserted.seq,
       inserted.committed_at,
       pg_notify('keel_commits', $1 || '/' || $2 || '/' || inserted.seq)
FROM inserted;
