-- The senders' claim: pending rows by when they are due.
CREATE INDEX IF NOT EXISTS hook_deliveries_due
    ON hook_deliveries (next_attempt_at) WHERE status = 'pending';
