-- FOR SHARE: a generation switch (FOR UPDATE) waits for batches in flight, and batches after
-- it see the new live generation.
SELECT projection, generation FROM projection_generations WHERE status = 'live' FOR SHARE;
