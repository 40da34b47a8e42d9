INSERT INTO projection_generations (projection, generation, status)
SELECT $1, coalesce(max(generation), 0) + 1, 'building'
FROM projection_generations
WHERE projection = $1
RETURNING generation;
