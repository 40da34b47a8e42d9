-- Links of one tree take turns (a transaction-level advisory lock on the tenant and root): the
-- next link's statement (a fresh snapshot under READ COMMITTED) counts every link the previous
-- one committed, so concurrent calls of one tree never grow it past its budget.
SELECT pg_advisory_xact_lock($1::int, hashtext($2 || '/' || $3));
