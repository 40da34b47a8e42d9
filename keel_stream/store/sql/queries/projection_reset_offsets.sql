-- Forget the source offsets stored for these topics (every projection, every generation): they
-- point into an earlier incarnation of the topic. A processor then resumes from offset zero and
-- drops by seq what its states already include.
WITH reset AS (
    DELETE FROM projection_offsets
    WHERE topic = ANY($1::text[])
    RETURNING 1
)
SELECT count(*) FROM reset;
