-- The trigger under this replica's lease, locked for one planning transaction; no row when
-- the lease lapsed (another replica may hold it now). The database's clock decides what is
-- due, so replicas with skewed clocks agree.
SELECT *, clock_timestamp() AS now FROM triggers
WHERE trigger_id = $1 AND lease_token = $2 AND lease_until > clock_timestamp()
FOR UPDATE;
