-- Claims under a per-tenant cap take turns: each waits for this transaction-level advisory lock,
-- so the next claim's statement (a fresh snapshot under READ COMMITTED) counts every running
-- attempt the previous one committed. Without it two concurrent claims could both see the
-- tenant one below its cap and both claim. Uncapped claims never take it.
SELECT pg_advisory_xact_lock($1::int, 0);
