-- A replay queues every row again, delivered or dead ones too, with the same webhook id.
INSERT INTO hook_deliveries (hook_id, tenant_id, session_id, seq, hook, decision_id, webhook_id, body)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::text[], $6::text[],
                     $7::text[], $8::text[])
ON CONFLICT (hook_id, tenant_id, session_id, seq, hook, decision_id) DO UPDATE
SET status = 'pending', attempts = 0, next_attempt_at = now(), lease_token = NULL,
    body = EXCLUDED.body, updated_at = now();
