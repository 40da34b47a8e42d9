-- The wake-ups of committed events ('tenant/session/seq' each), in a transaction of their own
-- right after the commit's: listeners (the API's streams, the workers, the relay) read the ledger
-- by seq when woken and also poll, so a lost wake-up costs latency, never an event.
SELECT pg_notify('keel_commits', payload) FROM unnest($1::text[]) AS payload;
