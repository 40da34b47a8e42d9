SELECT status, read_watermark FROM runs WHERE tenant_id = $1 AND session_id = $2;
