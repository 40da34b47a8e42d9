DELETE FROM projection_generations
WHERE status = 'retired' AND ($1::text IS NULL OR projection = $1);
