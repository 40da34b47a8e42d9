CREATE INDEX IF NOT EXISTS runs_claimable ON runs (updated_at) WHERE status IN ('pending', 'running');
