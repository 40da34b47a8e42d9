-- A client's cancel: recorded on the row (a takeover keeps it) and announced at once to the
-- owning worker, which listens on keel_cancels (NOTIFY is delivered when this commits).
WITH asked AS (
    UPDATE runs
    SET cancel_requested = true, updated_at = now()
    WHERE tenant_id = $1 AND session_id = $2 AND status = 'running'
    RETURNING tenant_id, session_id, lease_epoch
)
SELECT lease_epoch, pg_notify('keel_cancels', tenant_id || '/' || session_id)
FROM asked;
