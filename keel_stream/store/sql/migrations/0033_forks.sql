-- Forks (keel_stream.kernel.forks): a session whose log starts with another session's first N
-- events. The session records what it forks; each copied event records, in its metadata, the
-- event it copies. Both columns are NULL for everything else (adding them rewrites no row).
ALTER TABLE events ADD COLUMN IF NOT EXISTS metadata jsonb
    CHECK (metadata IS NULL OR jsonb_typeof(metadata) = 'object');
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS forked_from text;
ALTER TABLE sessions ADD COLUMN IF NOT EXISTS forked_at_seq bigint
    CHECK (forked_at_seq IS NULL OR forked_at_seq >= 0);

-- The fork's transaction in one round trip (queries/fork_session.sql). The kernel has checked
-- the source's events 1..p_at_seq (read before the call: a log only grows, so they are the ones
-- copied here) and passes each copy's metadata in seq order. Creates the session (NULL: the
-- id is taken), copies kind, payload, idempotency key and request digest (a retry of a copied
-- request on the fork replays it), writes the outbox rows, and when p_owed_input_seq is given the
-- pending run it owes. Refusals raise SQLSTATE KL001: session_not_found (the source),
-- fork_past_head, fork_of_external.
CREATE OR REPLACE FUNCTION keel_fork(
    p_tenant          text,
    p_source          text,
    p_target          text,
    p_at_seq          bigint,
    p_metadata        jsonb[],
    p_owed_input_seq  bigint
) RETURNS boolean
LANGUAGE plpgsql
AS $$
DECLARE
    v_head     bigint;
    v_external boolean;
BEGIN
    SELECT s.last_seq, s.state_owner = 'external' INTO v_head, v_external
    FROM sessions AS s
    WHERE s.tenant_id = p_tenant AND s.session_id = p_source;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'KL001', MESSAGE = 'session_not_found';
    END IF;
    IF v_external THEN
        RAISE EXCEPTION USING ERRCODE = 'KL001', MESSAGE = 'fork_of_external';
    END IF;
    IF p_at_seq > v_head OR coalesce(cardinality(p_metadata), 0) <> p_at_seq THEN
        RAISE EXCEPTION USING ERRCODE = 'KL001', MESSAGE = 'fork_past_head';
    END IF;
    INSERT INTO sessions (tenant_id, session_id, last_seq, last_committed_at, forked_from,
                          forked_at_seq)
    VALUES (p_tenant, p_target, p_at_seq, clock_timestamp(), p_source, p_at_seq)
    ON CONFLICT (tenant_id, session_id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO events (tenant_id, session_id, seq, kind, payload, dedupe_key, request_digest,
                        metadata)
    SELECT p_tenant, p_target, e.seq, e.kind, e.payload, e.dedupe_key, e.request_digest,
           p_metadata[e.seq]
    FROM events AS e
    WHERE e.tenant_id = p_tenant AND e.session_id = p_source AND e.seq <= p_at_seq
    ORDER BY e.seq;
    INSERT INTO outbox (tenant_id, session_id, seq)
    SELECT p_tenant, p_target, n FROM generate_series(1, p_at_seq) AS n;
    IF p_owed_input_seq IS NOT NULL THEN
        INSERT INTO runs (tenant_id, session_id, status, last_input_seq)
        VALUES (p_tenant, p_target, 'pending', p_owed_input_seq);
    END IF;
    RETURN true;
END
$$;
