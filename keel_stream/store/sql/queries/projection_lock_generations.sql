-- The switch takes the projection's generations FOR UPDATE: batches in flight (FOR SHARE on
-- the live row) finish first, and later batches see the new live generation.
SELECT generation, status
FROM projection_generations
WHERE projection = $1
ORDER BY generation
FOR UPDATE;
