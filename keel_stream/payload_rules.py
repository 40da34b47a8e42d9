"""The kernel's payload validation rules: each value is the stable error code of its violation
(re-exported by keel_stream.errors, where InvalidPayload carries one)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["PayloadRule"]


class PayloadRule(StrEnum):
    """The validation rules of the kernel; each value is the error code of its violation."""

    PAYLOAD_NOT_OBJECT = "payload_not_object"
    PAYLOAD_NOT_JSON = "payload_not_json"
    TEXT_NOT_STRING = "text_not_string"
    REQUEST_ID_NOT_STRING = "request_id_not_string"
    DELIVERY_INVALID = "delivery_invalid"
    SELECTION_NOT_OBJECT = "selection_not_object"
    RETRY_OF_INVALID = "retry_of_invalid"
    CONTENT_NOT_ARRAY = "content_not_array"
    TOOL_CALL_ID_MISSING = "tool_call_id_missing"
    TOOL_CALL_NAME_MISSING = "tool_call_name_missing"
    TOOL_CALL_ID_DUPLICATE = "tool_call_id_duplicate"
    INPUT_SEQS_INVALID = "input_seqs_invalid"
    TOOL_CALL_ID_MISMATCH = "tool_call_id_mismatch"
    TOOL_CALL_NOT_FOUND = "tool_call_not_found"
    STATUS_INVALID = "status_invalid"
    COUNTER_INVALID = "counter_invalid"
    TOOL_TIMINGS_INVALID = "tool_timings_invalid"
    BACKEND_MISSING = "backend_missing"
    EXTERNAL_REF_MISSING = "external_ref_missing"
    STATE_OWNER_INVALID = "state_owner_invalid"
    APPROVAL_INVALID = "approval_invalid"
    DECISION_INVALID = "decision_invalid"
