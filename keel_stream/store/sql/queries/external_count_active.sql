SELECT count(*) FROM sessions
WHERE tenant_id = $1 AND external_backend = $2 AND state_owner = 'external'
  AND external_status = 'active';
