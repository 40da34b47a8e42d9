UPDATE projection_generations
SET status = CASE WHEN generation = $2 THEN 'live' ELSE 'retired' END,
    live_at = CASE WHEN generation = $2 THEN now() ELSE live_at END
WHERE projection = $1 AND (generation = $2 OR status = 'live');
