-- One round trip: commits sorted by session, in one transaction (keel_commit, migration 0053).
-- $1: atomic (one caller's commits: a refusal raises SQLSTATE KL001 and writes nothing) or a
-- group of callers' commits (each refused one gets its reason in out_refusal, the others commit).
SELECT out_seq, out_committed_at, out_created, out_refusal, out_detail
FROM keel_commit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);
