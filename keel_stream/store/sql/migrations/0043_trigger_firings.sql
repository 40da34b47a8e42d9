-- One row per (trigger, key): a schedule's nominal time or a webhook's delivery id. The unique
-- key is what makes a nominal time planned once; the row records the decision taken (fire,
-- skip, buffer, cancel_other) and, once carried out, its outcome. outcome NULL means still to
-- do: a replica that died between recording and committing left it, and the next claim of the
-- trigger finishes it (the commit is idempotent by its requestId).
CREATE TABLE IF NOT EXISTS trigger_firings (
    firing_id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    trigger_id    text        NOT NULL REFERENCES triggers (trigger_id) ON DELETE CASCADE,
    tenant_id     text        NOT NULL,
    fire_key      text        NOT NULL,
    nominal_at    timestamptz NOT NULL,
    actual_at     timestamptz NOT NULL,
    decision      text        NOT NULL CHECK (decision IN ('fire', 'skip', 'buffer', 'cancel_other')),
    reason        text        NOT NULL,
    delivery      text        CHECK (delivery IN ('queue', 'guide')),
    session_id    text        NOT NULL,
    message       text        NOT NULL,
    detail        jsonb       NOT NULL DEFAULT '{}',
    outcome       text        CHECK (outcome IN ('committed', 'skipped', 'failed')),
    seq           bigint,
    created       boolean,
    error         text,
    planned_by    text        NOT NULL,
    recorded_at   timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    UNIQUE (trigger_id, fire_key)
);
