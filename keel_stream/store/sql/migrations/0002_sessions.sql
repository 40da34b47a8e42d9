-- A session row is the serialisation point of its log: every commit locks it (FOR UPDATE) and
-- advances last_seq, so seqs are dense and commit order equals seq order. Readers that follow
-- seq therefore never skip an event, which a sequence/bigserial could not promise.
-- External sessions (state_owner = 'external') carry the markers of the external gateway and
-- are excluded from the native run/lease machinery.
CREATE TABLE IF NOT EXISTS sessions (
    tenant_id        text        NOT NULL REFERENCES tenants (tenant_id),
    session_id       text        NOT NULL,
    last_seq         bigint      NOT NULL DEFAULT 0 CHECK (last_seq >= 0),
    state_owner      text        NOT NULL DEFAULT 'keel'
                                 CHECK (state_owner IN ('keel', 'external')),
    external_backend text,
    external_ref     text,
    external_status  text        CHECK (external_status IN ('active', 'closed', 'backend-unavailable')),
    metering         text        CHECK (metering IN ('external', 'none')),
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, session_id),
    CONSTRAINT sessions_external_markers CHECK (
        (state_owner = 'external')
        = (external_backend IS NOT NULL AND external_status IS NOT NULL AND metering IS NOT NULL)
    )
);
