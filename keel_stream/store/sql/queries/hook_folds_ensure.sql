-- In key order, as hook_folds_lock takes them: two dispatchers of a rebalance never deadlock.
INSERT INTO hook_folds (tenant_id, session_id)
SELECT t, s FROM unnest($1::text[], $2::text[]) AS k (t, s) ORDER BY t, s
ON CONFLICT (tenant_id, session_id) DO NOTHING;
