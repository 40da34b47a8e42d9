-- Superseded by last_input_seq (0015).
ALTER TABLE runs DROP COLUMN IF EXISTS pending_input;
