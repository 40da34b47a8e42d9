-- The deliveries log of one subscription, newest first, paged by delivery id.
CREATE INDEX IF NOT EXISTS hook_deliveries_by_hook ON hook_deliveries (hook_id, delivery_id);
