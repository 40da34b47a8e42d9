-- Serialises a tenant's trigger creations, so the count holds until the insert commits; FOR NO
-- KEY UPDATE leaves the foreign-key checks of sessions and keys (FOR KEY SHARE) unblocked.
SELECT tenant_id FROM tenants WHERE tenant_id = $1 FOR NO KEY UPDATE;
