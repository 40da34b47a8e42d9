INSERT INTO projection_dead_records (topic, partition, record_offset, error, value_head)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (topic, partition, record_offset) DO NOTHING;
