-- One active relay per outbox shard: a session-level advisory lock on the relay's connection.
-- It is released when that connection ends (crash, SIGKILL, network loss), so a standby that
-- keeps trying takes over within one poll interval.
SELECT pg_try_advisory_lock($1::int, $2::int);
