-- The commit transaction (migration 0031) with the commit-class gate decided by the kernel alone
-- (keel_stream.kernel.commits.class_gate): per commit, the caller passes the session states the
-- commit's class admits (p_admits, space-separated: native, external, external-closed) and
-- whether it carries the fence (p_fenced), in place of the class itself. This function names no
-- commit class: it reads the session's state under its lock and checks it against what it is
-- told. Everything else is 0031's, in the same order (see there):
--   the class gate refusal is now  class_gate {"index", "state"}, and the caller turns the
--   state back into the kernel's error (keel_stream.kernel.commits.check_class_gate).

DROP FUNCTION keel_commit(
    boolean, text[], text[], text[], text[], jsonb[], text[], text[], text[], bigint[], text[]
);

CREATE FUNCTION keel_commit(
    p_atomic       boolean,
    p_tenants      text[],
    p_sessions     text[],
    p_kinds        text[],
    p_admits       text[],
    p_fenced       boolean[],
    p_payloads     jsonb[],
    p_dedupe_keys  text[],
    p_digests      text[],
    p_lease_owners text[],
    p_lease_epochs bigint[],
    p_tool_calls   text[]
) RETURNS TABLE (
    out_seq          bigint,
    out_committed_at timestamptz,
    out_created      boolean,
    out_refusal      text,
    out_detail       text
)
LANGUAGE plpgsql
AS $$
DECLARE
    v_count    integer := coalesce(cardinality(p_kinds), 0);
    v_tenant   text;
    v_session  text;
    v_found    boolean := false;
    v_reserved bigint;
    v_last     bigint;
    v_n        integer;
    v_external boolean;
    v_closed   boolean;
    v_state    text;
    v_owner    text;
    v_epoch    bigint;
    v_active   boolean;
    v_original record;
    v_payload  jsonb;
    v_refusal  text;
    v_detail   json;
BEGIN
    FOR i IN 1 .. v_count LOOP
        IF v_session IS DISTINCT FROM p_sessions[i] OR v_tenant IS DISTINCT FROM p_tenants[i] THEN
            IF v_found AND v_last < v_reserved THEN
                UPDATE sessions SET last_seq = v_last
                WHERE tenant_id = v_tenant AND session_id = v_session;
            END IF;
            v_tenant := p_tenants[i];
            v_session := p_sessions[i];
            v_n := 1;
            WHILE i + v_n <= v_count AND p_sessions[i + v_n] = v_session
                  AND p_tenants[i + v_n] = v_tenant LOOP
                v_n := v_n + 1;
            END LOOP;
            -- The lock and the seqs in one write: when every commit is created (the common
            -- case) the row is written once.
            UPDATE sessions s
            SET last_seq = s.last_seq + v_n,
                last_committed_at = CASE
                    WHEN s.last_committed_at > clock_timestamp() - interval '1 second'
                    THEN s.last_committed_at ELSE clock_timestamp() END
            WHERE s.tenant_id = v_tenant AND s.session_id = v_session
            RETURNING s.last_seq, s.state_owner = 'external',
                      coalesce(s.external_status = 'closed', false)
            INTO v_reserved, v_external, v_closed;
            v_found := FOUND;
            v_last := v_reserved - v_n;
        END IF;
        v_refusal := NULL;
        v_state := CASE WHEN NOT v_external THEN 'native'
                        WHEN v_closed THEN 'external-closed' ELSE 'external' END;
        IF NOT v_found THEN
            v_refusal := 'session_not_found';
            v_detail := json_build_object('index', i - 1);
        ELSIF NOT v_state = ANY (string_to_array(p_admits[i], ' ')) THEN
            v_refusal := 'class_gate';
            v_detail := json_build_object('index', i - 1, 'state', v_state);
        ELSIF p_fenced[i] THEN
            SELECT r.lease_owner, r.lease_epoch INTO v_owner, v_epoch
            FROM runs r
            WHERE r.tenant_id = v_tenant AND r.session_id = v_session
            FOR SHARE;
            IF NOT FOUND
               OR v_owner IS DISTINCT FROM p_lease_owners[i]
               OR v_epoch IS DISTINCT FROM p_lease_epochs[i] THEN
                v_refusal := 'lease_fenced';
                v_detail := json_build_object('index', i - 1);
            END IF;
        END IF;
        IF v_refusal IS NULL AND p_dedupe_keys[i] IS NOT NULL THEN
            SELECT e.seq, e.kind, e.request_digest, e.committed_at INTO v_original
            FROM events e
            WHERE e.tenant_id = v_tenant AND e.session_id = v_session
              AND e.dedupe_key = p_dedupe_keys[i];
            IF FOUND THEN
                IF v_original.kind = p_kinds[i] AND v_original.request_digest = p_digests[i] THEN
                    out_seq := v_original.seq;
                    out_committed_at := v_original.committed_at;
                    out_created := false;
                    out_refusal := NULL;
                    out_detail := NULL;
                    RETURN NEXT;
                    CONTINUE;
                END IF;
                v_refusal := 'idempotency_conflict';
                v_detail := json_build_object(
                    'index', i - 1, 'seq', v_original.seq, 'kind', v_original.kind,
                    'digest', v_original.request_digest, 'committedAt', v_original.committed_at);
            END IF;
        END IF;
        v_payload := p_payloads[i];
        IF v_refusal IS NULL AND p_kinds[i] = 'user.message'
           AND v_payload ->> 'delivery' = 'guide' THEN
            -- A guide needs an active attempt to be injected into; without one it is written
            -- as the queue input it becomes (keel_stream.kernel.delivery).
            SELECT r.status = 'running' AND r.lease_expires_at > now() INTO v_active
            FROM runs r
            WHERE r.tenant_id = v_tenant AND r.session_id = v_session
            FOR SHARE;
            IF NOT coalesce(v_active, false) THEN
                v_payload := jsonb_set(v_payload, '{delivery}', '"queue"');
            END IF;
        END IF;
        IF v_refusal IS NULL AND p_tool_calls[i] IS NOT NULL THEN
            IF NOT EXISTS (
                SELECT 1
                FROM events e
                WHERE e.tenant_id = v_tenant
                  AND e.session_id = v_session
                  AND e.kind = 'assistant.message'
                  AND e.payload -> 'content' @> jsonb_build_array(
                          jsonb_build_object('type', 'toolCall', 'id', p_tool_calls[i]))
            ) THEN
                v_refusal := 'tool_call_not_found';
                v_detail := json_build_object('index', i - 1);
            END IF;
        END IF;
        IF v_refusal IS NOT NULL THEN
            IF p_atomic THEN
                RAISE EXCEPTION USING ERRCODE = 'KL001', MESSAGE = v_refusal,
                    DETAIL = v_detail::text;
            END IF;
            out_seq := NULL;
            out_committed_at := NULL;
            out_created := false;
            out_refusal := v_refusal;
            out_detail := v_detail::text;
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_last := v_last + 1;
        INSERT INTO events (tenant_id, session_id, seq, kind, payload, dedupe_key, request_digest)
        VALUES (v_tenant, v_session, v_last, p_kinds[i], v_payload, p_dedupe_keys[i],
                p_digests[i])
        RETURNING committed_at INTO out_committed_at;
        INSERT INTO outbox (tenant_id, session_id, seq) VALUES (v_tenant, v_session, v_last);
        IF p_kinds[i] = 'user.message' THEN
            -- An input makes the session owe a run: pending, or, while an attempt runs, a newer
            -- last_input_seq that its settling compares with what it accounted for; a run that
            -- had ended starts a fresh budget.
            INSERT INTO runs (tenant_id, session_id, status, last_input_seq)
            VALUES (v_tenant, v_session, 'pending', v_last)
            ON CONFLICT (tenant_id, session_id) DO UPDATE
            SET last_input_seq = GREATEST(runs.last_input_seq, excluded.last_input_seq),
                attempts = CASE WHEN runs.status IN ('done', 'failed') THEN 0
                                ELSE runs.attempts END,
                status = CASE WHEN runs.status = 'running' THEN 'running' ELSE 'pending' END,
                updated_at = now();
        END IF;
        out_seq := v_last;
        out_created := true;
        out_refusal := NULL;
        out_detail := NULL;
        RETURN NEXT;
    END LOOP;
    IF v_found AND v_last < v_reserved THEN
        UPDATE sessions SET last_seq = v_last
        WHERE tenant_id = v_tenant AND session_id = v_session;
    END IF;
END
$$;
