-- Parked sessions not yet due for another try: reconcile leaves them alone until then.
SELECT tenant_id, session_id, projection, generation
FROM projection_parked
WHERE retry_at > now();
