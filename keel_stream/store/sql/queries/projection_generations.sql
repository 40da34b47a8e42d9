SELECT g.projection, g.generation, g.status, g.created_at, g.live_at,
       (SELECT count(*) FROM projection_states AS p
        WHERE p.projection = g.projection AND p.generation = g.generation) AS sessions
FROM projection_generations AS g
ORDER BY g.projection, g.generation;
