-- The decision is answered (by a person or by the sweeper): its deadline is done with.
UPDATE decision_deadlines SET closed = true, lease_owner = NULL, lease_until = NULL
WHERE tenant_id = $1 AND session_id = $2 AND decision_id = $3;
