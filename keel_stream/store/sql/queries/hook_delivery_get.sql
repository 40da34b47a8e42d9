SELECT * FROM hook_deliveries WHERE hook_id = $1 AND delivery_id = $2;
