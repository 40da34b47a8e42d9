-- The source position of each projection generation, written in the same transaction as the
-- states it produced, so a processor resumes exactly where its stored state ends.
CREATE TABLE IF NOT EXISTS projection_offsets (
    projection  text    NOT NULL,
    generation  integer NOT NULL,
    topic       text    NOT NULL,
    partition   integer NOT NULL,
    next_offset bigint  NOT NULL CHECK (next_offset >= 0),
    PRIMARY KEY (projection, generation, topic, partition),
    FOREIGN KEY (projection, generation) REFERENCES projection_generations (projection, generation)
);
