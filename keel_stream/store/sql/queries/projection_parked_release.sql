-- Sessions that applied after all: no longer parked.
DELETE FROM projection_parked
WHERE (tenant_id, session_id, projection, generation) IN (
    SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int[])
);
