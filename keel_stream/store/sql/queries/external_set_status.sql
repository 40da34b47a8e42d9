UPDATE sessions SET external_status = $3
WHERE tenant_id = $1 AND session_id = $2 AND state_owner = 'external'
  AND external_status <> 'closed'
RETURNING external_status;
