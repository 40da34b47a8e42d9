-- A page of the tenant's sessions by id, after the cursor ($2; NULL: from the start). The cursor
-- is an index condition on the primary key (every id sorts after ''), so a page deep in the list
-- costs what the first one does; the run's status is looked up for the page's rows only.
SELECT s.session_id, s.last_seq, s.state_owner, s.external_backend, s.external_ref,
       s.external_status, s.metering, s.created_at,
       (SELECT r.status
        FROM runs AS r
        WHERE r.tenant_id = s.tenant_id AND r.session_id = s.session_id) AS run_status
FROM sessions AS s
WHERE s.tenant_id = $1 AND s.session_id > coalesce($2::text, '')
ORDER BY s.session_id
LIMIT $3;
