-- Try parked sessions again at once (all, or those of a projection, tenant or session): the
-- reconcile loop applies them from the ledger on its next tick.
WITH gone AS (
    DELETE FROM projection_parked
    WHERE ($1::text IS NULL OR projection = $1)
      AND ($2::text IS NULL OR tenant_id = $2)
      AND ($3::text IS NULL OR session_id = $3)
    RETURNING 1
)
SELECT count(*) FROM gone;
