INSERT INTO projection_generations (projection, generation, status, live_at)
VALUES ('transcript', 1, 'live', now()), ('run_status', 1, 'live', now()), ('sse', 1, 'live', now())
ON CONFLICT (projection, generation) DO NOTHING;
