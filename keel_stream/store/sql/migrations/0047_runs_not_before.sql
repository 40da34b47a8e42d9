-- A run is not claimed before this time: the model server asked the attempt that settled it to
-- wait (Retry-After), and the next attempt would send the same request. NULL: claimable at once.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS not_before timestamptz;
