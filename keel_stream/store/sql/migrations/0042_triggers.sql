-- Triggers: schedules and inbound webhooks that commit input into sessions (docs/triggers.md).
-- spec is the validated definition as created. next_nominal_at is the next nominal time to
-- plan and next_fire_at its actual (jittered) time; the scheduler claims a row when that is due
-- and holds it under a lease (lease_token, lease_until) while it plans and fires, so two
-- replicas never work one trigger at once and a dead replica's claim lapses.
CREATE TABLE IF NOT EXISTS triggers (
    trigger_id       text        PRIMARY KEY,
    tenant_id        text        NOT NULL REFERENCES tenants (tenant_id),
    kind             text        NOT NULL CHECK (kind IN ('schedule', 'webhook')),
    spec             jsonb       NOT NULL,
    secret           text,
    state            text        NOT NULL DEFAULT 'active'
                                 CHECK (state IN ('active', 'paused', 'completed')),
    next_nominal_at  timestamptz,
    next_fire_at     timestamptz,
    fires            bigint      NOT NULL DEFAULT 0 CHECK (fires >= 0),
    lease_token      text,
    lease_until      timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
