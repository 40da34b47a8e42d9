-- A webhook delivery locks its trigger like a scheduler's planning transaction does.
SELECT *, clock_timestamp() AS now FROM triggers WHERE trigger_id = $1 FOR UPDATE;
