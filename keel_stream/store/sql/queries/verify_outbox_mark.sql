-- The newest outbox row id: every event committed before it has an outbox row at or below it
-- (read in the same snapshot as the session heads).
SELECT coalesce(max(id), 0)::bigint FROM outbox;
