-- The end of the reconcile sweep's next page: the last of the $3 sessions after ($1, $2) in key
-- order (no row: the sweep has reached the end and starts over).
SELECT page.tenant_id, page.session_id
FROM (
    SELECT tenant_id, session_id
    FROM sessions
    WHERE (tenant_id, session_id) > ($1::text, $2::text)
    ORDER BY tenant_id, session_id
    LIMIT $3
) AS page
ORDER BY page.tenant_id DESC, page.session_id DESC
LIMIT 1;
