-- A cancel asked for by a client; the owning worker sees it at its next heartbeat.
ALTER TABLE runs ADD COLUMN IF NOT EXISTS cancel_requested boolean NOT NULL DEFAULT false;
