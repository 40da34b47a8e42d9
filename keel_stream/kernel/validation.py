"""Payload validation: the shapes a replay depends on, refused at commit time.

A bad payload in the log is permanent, so the kernel refuses it before it is written. Each rule
raises InvalidPayload with its own stable code (PayloadRule).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson

from keel_stream.errors import InvalidPayload, PayloadRule
from keel_stream.kernel.canonical import canonical_json
from keel_stream.kernel.decisions import validate_answer, validate_approval
from keel_stream.kernel.delivery import Delivery
from keel_stream.kernel.subagents import validate_report
from keel_stream.kernel.vocabulary import Kind

__all__ = ["RUN_FINISHED_COUNTERS", "RUN_FINISHED_STATUSES", "is_json_int", "validate_payload"]

RUN_FINISHED_STATUSES: Final = frozenset({"done", "failed", "cancelled"})
RUN_FINISHED_COUNTERS: Final = ("turns", "tokens", "durationMs")
"""Counters of a run summary; ``tokens`` may also be an object of counters (input/output/...)."""

Payload = Mapping[str, Any]


def is_json_int(value: Any) -> bool:
    """An integer in the JSON sense: bools are not integers, floats never are."""
    return isinstance(value, int) and not isinstance(value, bool)


def _fail(rule: PayloadRule, message: str) -> InvalidPayload:
    return InvalidPayload(rule, message)


def _optional_string(payload: Payload, field: str, rule: PayloadRule) -> None:
    if field in payload and not isinstance(payload[field], str):
        raise _fail(rule, f"{field} must be a string")


def _validate_user_message(payload: Payload) -> None:
    _optional_string(payload, "text", PayloadRule.TEXT_NOT_STRING)
    _optional_string(payload, "requestId", PayloadRule.REQUEST_ID_NOT_STRING)
    if "delivery" in payload and payload["delivery"] not in tuple(Delivery):
        raise _fail(PayloadRule.DELIVERY_INVALID, "delivery must be exactly 'queue' or 'guide'")
    if "selection" in payload and not isinstance(payload["selection"], Mapping):
        raise _fail(PayloadRule.SELECTION_NOT_OBJECT, "selection must be a JSON object")
    if "retryOf" in payload:
        retry_of = payload["retryOf"]
        if not is_json_int(retry_of) or retry_of < 0:
            raise _fail(PayloadRule.RETRY_OF_INVALID, "retryOf must be a non-negative integer")
    validate_answer(payload)
    validate_report(payload)


def tool_call_blocks(payload: Payload) -> list[Mapping[str, Any]]:
    """The toolCall content blocks of an assistant message, in order."""
    content = payload.get("content", [])
    if not isinstance(content, list):
        return []
    # dict, not Mapping: parsed JSON is always dict, and the ABC check is slow on replay paths.
    return [b for b in content if isinstance(b, dict) and b.get("type") == "toolCall"]


def _validate_assistant_message(payload: Payload) -> None:
    if "content" in payload and not isinstance(payload["content"], list):
        raise _fail(PayloadRule.CONTENT_NOT_ARRAY, "content must be an array of blocks")
    seen: set[str] = set()
    for block in tool_call_blocks(payload):
        call_id = block.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise _fail(PayloadRule.TOOL_CALL_ID_MISSING, "every toolCall block needs an id")
        name = block.get("name")
        if not isinstance(name, str) or not name:
            raise _fail(PayloadRule.TOOL_CALL_NAME_MISSING, f"toolCall {call_id!r} needs a name")
        if call_id in seen:
            raise _fail(PayloadRule.TOOL_CALL_ID_DUPLICATE, f"toolCall id {call_id!r} repeats")
        seen.add(call_id)
        validate_approval(block)
    if "inputSeqs" in payload:
        seqs = payload["inputSeqs"]
        if not isinstance(seqs, list) or not all(is_json_int(s) and s > 0 for s in seqs):
            raise _fail(PayloadRule.INPUT_SEQS_INVALID, "inputSeqs must be positive integers")


def _validate_tool_result(payload: Payload) -> None:
    call_id = payload.get("toolCallId")
    if not isinstance(call_id, str) or not call_id:
        raise _fail(PayloadRule.TOOL_CALL_ID_MISMATCH, "payload.toolCallId must name the call")


def _is_counter(value: Any) -> bool:
    return is_json_int(value) and value >= 0


def _validate_run_finished(payload: Payload) -> None:
    if payload.get("status") not in RUN_FINISHED_STATUSES:
        raise _fail(PayloadRule.STATUS_INVALID, "status must be one of done, failed, cancelled")
    for field in RUN_FINISHED_COUNTERS:
        if field not in payload:
            continue
        value = payload[field]
        nested_ok = (
            field == "tokens"
            and isinstance(value, Mapping)
            and all(_is_counter(v) for v in value.values())
        )
        if not (_is_counter(value) or nested_ok):
            raise _fail(PayloadRule.COUNTER_INVALID, f"{field} must be a non-negative integer")
    if "toolTimings" in payload:
        timings = payload["toolTimings"]
        if not isinstance(timings, list) or not all(isinstance(t, Mapping) for t in timings):
            raise _fail(PayloadRule.TOOL_TIMINGS_INVALID, "toolTimings must be an array of objects")


def _validate_external_event(payload: Payload) -> None:
    backend = payload.get("backend")
    if not isinstance(backend, str) or not backend:
        raise _fail(PayloadRule.BACKEND_MISSING, "external.event must name its backend")
    ref = payload.get("externalRef")
    if not isinstance(ref, str) or not ref:
        raise _fail(PayloadRule.EXTERNAL_REF_MISSING, "external.event must name its externalRef")
    if "stateOwner" in payload and payload["stateOwner"] != "external":
        raise _fail(PayloadRule.STATE_OWNER_INVALID, "stateOwner must be 'external' when present")


_RULES: Final[Mapping[Kind, Callable[[Payload], None]]] = {
    Kind.USER_MESSAGE: _validate_user_message,
    Kind.ASSISTANT_MESSAGE: _validate_assistant_message,
    Kind.TOOL_RESULT: _validate_tool_result,
    Kind.RUN_FINISHED: _validate_run_finished,
    Kind.EXTERNAL_EVENT: _validate_external_event,
}


def _validate_storable(payload: Payload) -> None:
    try:
        encoded = canonical_json(payload)
    except (orjson.JSONEncodeError, TypeError, ValueError, RecursionError) as exc:
        raise _fail(PayloadRule.PAYLOAD_NOT_JSON, f"payload is not storable JSON: {exc}") from exc
    if b"\\u0000" in encoded:
        raise _fail(PayloadRule.PAYLOAD_NOT_JSON, "strings must not contain the NUL character")


def validate_payload(kind: Kind, payload: Any) -> None:
    """Refuse a payload that a replay could not rely on. Unknown fields are allowed."""
    if not isinstance(payload, Mapping):
        raise _fail(PayloadRule.PAYLOAD_NOT_OBJECT, "payload must be a JSON object")
    _validate_storable(payload)
    rule = _RULES.get(kind)
    if rule is not None:
        rule(payload)
