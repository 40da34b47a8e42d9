-- Serialises the subscriptions of one tenant (their count is bounded); FOR NO KEY UPDATE leaves
-- the foreign-key checks of sessions and keys (FOR KEY SHARE) unblocked.
SELECT tenant_id FROM tenants WHERE tenant_id = $1 FOR NO KEY UPDATE;
