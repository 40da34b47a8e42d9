SELECT firing_id FROM trigger_firings
WHERE trigger_id = $1 AND decision = 'buffer' AND outcome IS NULL
LIMIT 1;
