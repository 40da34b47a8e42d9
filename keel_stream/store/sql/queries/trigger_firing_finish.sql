-- The first to record a firing's outcome wins; a late duplicate (two replicas finishing one
-- crash leftover) writes nothing and writes no second trigger.after.
UPDATE trigger_firings
SET outcome = $2, seq = $3, created = $4, error = $5, finished_at = now()
WHERE firing_id = $1 AND outcome IS NULL
RETURNING *;
