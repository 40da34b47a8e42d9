-- A row already there (a duplicate record, a second dispatcher) is left as it is.
INSERT INTO hook_deliveries (hook_id, tenant_id, session_id, seq, hook, decision_id, webhook_id, body)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[],
                     $7::text[], $8::text[])
ON CONFLICT (hook_id, tenant_id, session_id, seq, hook, decision_id) DO NOTHING;
