SELECT * FROM trigger_firings WHERE trigger_id = $1 AND fire_key = $2;
