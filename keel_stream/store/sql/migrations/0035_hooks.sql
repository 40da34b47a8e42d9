-- Hook subscriptions: a tenant's webhook endpoints (docs/hooks.md). The secret signs every
-- attempt; after a rotation the previous one signs too until previous_until, so receivers can
-- switch without dropping a delivery. A subscription answered 410 Gone is disabled: its
-- deliveries stay where they are and are no longer claimed.
CREATE TABLE IF NOT EXISTS hook_subscriptions (
    hook_id          text        PRIMARY KEY,
    tenant_id        text        NOT NULL REFERENCES tenants (tenant_id),
    url              text        NOT NULL,
    events           text[]      NOT NULL,
    session_ids      text[],
    session_prefix   text,
    secret           text        NOT NULL,
    previous_secret  text,
    previous_until   timestamptz,
    state            text        NOT NULL DEFAULT 'active' CHECK (state IN ('active', 'disabled')),
    disabled_reason  text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    rotated_at       timestamptz,
    UNIQUE (tenant_id, hook_id)
);
