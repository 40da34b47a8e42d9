-- A tool.result must pair with a committed assistant.message that made the call.
SELECT EXISTS (
    SELECT 1
    FROM events
    WHERE tenant_id = $1
      AND session_id = $2
      AND kind = 'assistant.message'
      AND payload -> 'content' @> jsonb_build_array(
              jsonb_build_object('type', 'toolCall', 'id', $3::text))
);
