SELECT last_seq FROM sessions WHERE tenant_id = $1 AND session_id = $2;
