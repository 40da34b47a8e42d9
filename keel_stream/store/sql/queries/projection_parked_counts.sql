SELECT projection, generation, count(*) AS sessions
FROM projection_parked
GROUP BY projection, generation;
