SELECT * FROM trigger_firings WHERE trigger_id = $1 AND outcome IS NULL ORDER BY firing_id;
