-- When the session's latest event was committed, to the second: set by the commit with last_seq,
-- which moves it only once it is a second old; NULL until the first commit after this migration.
-- The reconcile finds recently committed sessions through it (index: 0022); the others are
-- covered by its rolling sweep.
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS last_committed_at timestamptz;
