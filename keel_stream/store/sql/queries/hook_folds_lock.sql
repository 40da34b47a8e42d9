-- Each session's fold, locked for the batch, and who owns its state (external sessions have
-- no model requests here, so no turn.* hooks).
SELECT f.tenant_id, f.session_id, f.last_seq, f.state, coalesce(s.state_owner, 'keel') AS owner
FROM hook_folds f
JOIN unnest($1::text[], $2::text[]) AS k (t, sid) ON f.tenant_id = k.t AND f.session_id = k.sid
LEFT JOIN sessions s ON s.tenant_id = f.tenant_id AND s.session_id = f.session_id
ORDER BY f.tenant_id, f.session_id
FOR UPDATE OF f;
