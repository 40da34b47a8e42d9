UPDATE hook_folds f
SET last_seq = k.seq, state = k.state::jsonb, updated_at = now()
FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS k (t, sid, seq, state)
WHERE f.tenant_id = k.t AND f.session_id = k.sid;
