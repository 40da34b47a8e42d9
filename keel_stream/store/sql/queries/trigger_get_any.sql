SELECT * FROM triggers WHERE trigger_id = $1;
