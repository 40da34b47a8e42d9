-- How many subagents a tree has.
SELECT count(*) FROM subagent_links WHERE tenant_id = $1 AND root_session = $2;
