DELETE FROM outbox WHERE id = ANY($1::bigint[]);
