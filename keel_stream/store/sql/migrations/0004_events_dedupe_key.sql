-- Idempotency scope is the session: one dedupe key can be inserted once per session, so a
-- retried input or a re-run tool lands in the log exactly once. Kinds without a key store NULL.
CREATE UNIQUE INDEX IF NOT EXISTS events_dedupe_key
    ON events (tenant_id, session_id, dedupe_key)
    WHERE dedupe_key IS NOT NULL;
