-- Drop retired generations (their states, offsets, transcript entries and rows); the live one
-- is never touched.
WITH retired AS (
    SELECT projection, generation
    FROM projection_generations
    WHERE status = 'retired' AND ($1::text IS NULL OR projection = $1)
), states AS (
    DELETE FROM projection_states AS p USING retired AS r
    WHERE p.projection = r.projection AND p.generation = r.generation
    RETURNING 1
), offsets AS (
    DELETE FROM projection_offsets AS o USING retired AS r
    WHERE o.projection = r.projection AND o.generation = r.generation
    RETURNING 1
), entries AS (
    -- Always runs (a data-modifying CTE), though nothing counts it.
    DELETE FROM transcript_entries AS e USING retired AS r
    WHERE r.projection = 'transcript' AND e.generation = r.generation
)
SELECT (SELECT count(*) FROM retired) AS generations, (SELECT count(*) FROM states) AS states,
       (SELECT count(*) FROM offsets) AS offsets;
