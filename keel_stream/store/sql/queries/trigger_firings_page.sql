SELECT * FROM trigger_firings
WHERE trigger_id = $1 AND ($2::bigint = 0 OR firing_id < $2)
ORDER BY firing_id DESC
LIMIT $3;
