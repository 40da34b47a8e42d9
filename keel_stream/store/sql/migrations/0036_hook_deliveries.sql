-- One row per (subscription, hook event): the dispatcher and replays write it, senders claim it.
-- The unique key makes a Kafka redelivery, a relay duplicate or a second dispatcher a no-op;
-- webhook_id is derived from the same parts (keel_stream.hooks.envelope), and body is the
-- exact text every attempt signs. next_attempt_at doubles as the lease: a claim moves it past
-- the attempt's timeout, so the row of a sender that died is due again when that passes, and
-- lease_token fences a late completion of a claim that was taken over.
CREATE TABLE IF NOT EXISTS hook_deliveries (
    delivery_id      bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    hook_id          text        NOT NULL REFERENCES hook_subscriptions (hook_id) ON DELETE CASCADE,
    tenant_id        text        NOT NULL,
    session_id       text        NOT NULL,
    seq              bigint      NOT NULL CHECK (seq >= 1),
    hook             text        NOT NULL,
    decision_id      text        NOT NULL DEFAULT '',
    webhook_id       text        NOT NULL,
    body             text        NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    lease_token      text,
    last_status      integer,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    UNIQUE (hook_id, tenant_id, session_id, seq, hook, decision_id)
);
