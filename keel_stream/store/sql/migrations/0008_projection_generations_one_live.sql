CREATE UNIQUE INDEX IF NOT EXISTS projection_generations_one_live
    ON projection_generations (projection)
    WHERE status = 'live';
