-- The scheduler's claim: active triggers by when they are due.
CREATE INDEX IF NOT EXISTS triggers_due ON triggers (next_fire_at) WHERE state = 'active';
