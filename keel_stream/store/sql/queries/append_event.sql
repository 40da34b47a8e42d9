-- Runs under the session row lock (lock_session.sql): seq = last_seq + 1, the event, its outbox
-- row and the NOTIFY wake-up are one statement in the commit's transaction. NOTIFY is delivered
-- only when the transaction commits. With $7 (a user.message), the same statement makes the
-- session owe a run: pending, or, while an attempt runs, a newer last_input_seq that its
-- settling compares with what it accounted for; a run that had ended starts a fresh budget.
-- last_committed_at lets the projector's reconcile find recently committed sessions (an index);
-- it moves only when it is a second old, so a burst of commits to one session changes no
-- indexed column after the first and the row update stays HOT (no index writes).
WITH advanced AS (
    UPDATE sessions
    SET last_seq = last_seq + 1,
        last_committed_at = CASE WHEN last_committed_at > clock_timestamp() - interval '1 second'
                                 THEN last_committed_at ELSE clock_timestamp() END
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
), owed AS (
    INSERT INTO runs (tenant_id, session_id, status, last_input_seq)
    SELECT $1, $2, 'pending', inserted.seq
    FROM inserted
    WHERE $7::boolean
    ON CONFLICT (tenant_id, session_id) DO UPDATE
    SET last_input_seq = GREATEST(runs.last_input_seq, excluded.last_input_seq),
        attempts = CASE WHEN runs.status IN ('done', 'failed') THEN 0 ELSE runs.attempts END,
        status = CASE WHEN runs.status = 'running' THEN 'running' ELSE 'pending' END,
        updated_at = now()
)
SELECT inserted.seq,
       inserted.committed_at,
       pg_notify('keel_commits', $1 || '/' || $2 || '/' || inserted.seq)
FROM inserted;
