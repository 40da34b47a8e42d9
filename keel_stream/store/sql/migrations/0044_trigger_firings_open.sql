-- The firings still to carry out (crash leftovers, buffered ones): the claim looks them up.
CREATE INDEX IF NOT EXISTS trigger_firings_open
    ON trigger_firings (trigger_id) WHERE outcome IS NULL;
