-- A fork in one round trip (keel_fork, migration 0033): true when created, false when the new
-- session's id is taken. Refusals raise SQLSTATE KL001.
SELECT keel_fork($1, $2, $3, $4, $5::jsonb[], $6);
