-- The scheduler's claim: active triggers due now, and triggers with a firing still to carry
-- out (a crash leftover; a buffered one unless the trigger is paused), not leased by a live
-- replica. SKIP LOCKED: replicas claiming at once take different rows; the lease then keeps
-- the row theirs until they release it or it lapses.
WITH due AS (
    SELECT trigger_id FROM triggers
    WHERE (lease_until IS NULL OR lease_until < now())
      AND ((state = 'active' AND next_fire_at <= now())
           OR (state <> 'paused'
               AND trigger_id IN (SELECT f.trigger_id FROM trigger_firings f
                                  WHERE f.outcome IS NULL))
           OR trigger_id IN (SELECT f.trigger_id FROM trigger_firings f
                             WHERE f.outcome IS NULL AND f.decision <> 'buffer'))
    ORDER BY next_fire_at NULLS LAST
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE triggers t
SET lease_token = $1, lease_until = now() + make_interval(secs => $2)
FROM due
WHERE t.trigger_id = due.trigger_id
RETURNING t.trigger_id;
