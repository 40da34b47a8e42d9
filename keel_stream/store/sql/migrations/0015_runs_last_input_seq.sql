-- The seq of the session's newest input. Settling compares it with the highest seq the attempt
-- accounted for: an input committed after that was never presented, so the session owes a run.
-- It replaces the pending_input flag, which could not tell a guide the attempt answered from
-- an input it never saw.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS last_input_seq bigint NOT NULL DEFAULT 0;
