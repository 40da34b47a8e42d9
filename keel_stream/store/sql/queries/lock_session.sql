-- Serialises every commit of one session: fence, idempotency and seq are decided under it.
SELECT last_seq, state_owner, external_status
FROM sessions
WHERE tenant_id = $1 AND session_id = $2
FOR UPDATE;
