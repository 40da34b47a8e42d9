-- A tenant's triggers, paged by id (the API's list).
CREATE INDEX IF NOT EXISTS triggers_by_tenant ON triggers (tenant_id, trigger_id);
