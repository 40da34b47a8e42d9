-- The transcript as rows: one per entry, keyed by (generation, tenant, session, seq), with the
-- entry's place in the model context (position ascending; NULL: not in it). Every context
-- message is the message of the entry with its seq, so the context is these positions, not
-- copies. The transcript's row in projection_states keeps its last_seq and a small head:
-- {"waiting": [...], "contextEnd": n}. A batch writes its new entries and the positions that
-- changed instead of the whole session. The entry is json, not jsonb: it is written once and
-- read whole, and json takes it (and gives it back) as text, without building a tree. No
-- foreign key to projection_generations: it would be checked row by row on every insert;
-- pruning a generation deletes its rows.
CREATE TABLE IF NOT EXISTS transcript_entries (
    generation integer NOT NULL,
    tenant_id  text    NOT NULL,
    session_id text    NOT NULL,
    seq        bigint  NOT NULL CHECK (seq >= 1),
    position   bigint,
    entry      json    NOT NULL,
    PRIMARY KEY (generation, tenant_id, session_id, seq)
);

-- Transcripts stored as one document per session (every generation) move into rows: each entry
-- a row, its position its index in the stored context, and the document becomes the head.
WITH documents AS (
    SELECT generation, tenant_id, session_id, state
    FROM projection_states
    WHERE projection = 'transcript' AND state ? 'entries'
), placed AS (
    SELECT d.generation, d.tenant_id, d.session_id, (c.message->>'seq')::bigint AS seq,
           c.ordinality - 1 AS position
    FROM documents AS d
    CROSS JOIN LATERAL jsonb_array_elements(coalesce(d.state->'context', '[]'))
        WITH ORDINALITY AS c(message, ordinality)
)
INSERT INTO transcript_entries (generation, tenant_id, session_id, seq, position, entry)
SELECT d.generation, d.tenant_id, d.session_id, (e.entry->>'seq')::bigint, p.position,
       e.entry::json
FROM documents AS d
CROSS JOIN LATERAL jsonb_array_elements(d.state->'entries') AS e(entry)
LEFT JOIN placed AS p
  ON p.generation = d.generation AND p.tenant_id = d.tenant_id
 AND p.session_id = d.session_id AND p.seq = (e.entry->>'seq')::bigint
ON CONFLICT (generation, tenant_id, session_id, seq) DO NOTHING;

UPDATE projection_states
SET state = jsonb_build_object(
        'waiting', coalesce(state->'waiting', '[]'),
        'contextEnd', jsonb_array_length(coalesce(state->'context', '[]')))
WHERE projection = 'transcript' AND state ? 'entries';
