-- Each projection's read model lives in generations: the live one serves readers while a
-- rebuild fills the next; the switch is one UPDATE, so readers never see a partial model.
CREATE TABLE IF NOT EXISTS projection_generations (
    projection text        NOT NULL,
    generation integer     NOT NULL CHECK (generation >= 1),
    status     text        NOT NULL CHECK (status IN ('building', 'live', 'retired')),
    created_at timestamptz NOT NULL DEFAULT now(),
    live_at    timestamptz,
    PRIMARY KEY (projection, generation)
);
