SELECT count(*) FROM projection_dead_records WHERE topic = $1;
