"""Payload cases shared by the kernel's unit tests and the store's integration tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from keel_stream.errors import PayloadRule


@dataclass(frozen=True)
class BadPayload:
    """A payload that one validation rule must refuse."""

    name: str
    kind: str
    payload: dict[str, Any]
    rule: PayloadRule
    key: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def call(call_id: Any = "call-1", name: Any = "search") -> dict[str, Any]:
    block: dict[str, Any] = {"type": "toolCall", "arguments": {}}
    if call_id is not None:
        block["id"] = call_id
    if name is not None:
        block["name"] = name
    return block


# One entry per rule of the kernel's validation (seed 001 §8 plus the storability rules).
BAD_PAYLOADS: tuple[BadPayload, ...] = (
    BadPayload("user text number", "user.message", {"text": 5}, PayloadRule.TEXT_NOT_STRING),
    BadPayload(
        "user requestId number", "user.message", {"requestId": 7}, PayloadRule.REQUEST_ID_NOT_STRING
    ),
    BadPayload(
        "user delivery now", "user.message", {"delivery": "now"}, PayloadRule.DELIVERY_INVALID
    ),
    BadPayload(
        "user delivery case", "user.message", {"delivery": "Queue"}, PayloadRule.DELIVERY_INVALID
    ),
    BadPayload(
        "user delivery null", "user.message", {"delivery": None}, PayloadRule.DELIVERY_INVALID
    ),
    BadPayload(
        "user selection list", "user.message", {"selection": [1]}, PayloadRule.SELECTION_NOT_OBJECT
    ),
    BadPayload("user retryOf -1", "user.message", {"retryOf": -1}, PayloadRule.RETRY_OF_INVALID),
    BadPayload("user retryOf 1.5", "user.message", {"retryOf": 1.5}, PayloadRule.RETRY_OF_INVALID),
    BadPayload(
        "user retryOf true", "user.message", {"retryOf": True}, PayloadRule.RETRY_OF_INVALID
    ),
    BadPayload("user retryOf str", "user.message", {"retryOf": "3"}, PayloadRule.RETRY_OF_INVALID),
    BadPayload(
        "assistant content object",
        "assistant.message",
        {"content": {"type": "text"}},
        PayloadRule.CONTENT_NOT_ARRAY,
    ),
    BadPayload(
        "assistant call without id",
        "assistant.message",
        {"content": [call(call_id=None)]},
        PayloadRule.TOOL_CALL_ID_MISSING,
    ),
    BadPayload(
        "assistant call empty id",
        "assistant.message",
        {"content": [call(call_id="")]},
        PayloadRule.TOOL_CALL_ID_MISSING,
    ),
    BadPayload(
        "assistant call without name",
        "assistant.message",
        {"content": [call(name=None)]},
        PayloadRule.TOOL_CALL_NAME_MISSING,
    ),
    BadPayload(
        "assistant call id repeats",
        "assistant.message",
        {"content": [call("c1", "a"), {"type": "text", "text": "x"}, call("c1", "b")]},
        PayloadRule.TOOL_CALL_ID_DUPLICATE,
    ),
    BadPayload(
        "assistant inputSeqs zero",
        "assistant.message",
        {"content": [], "inputSeqs": [0]},
        PayloadRule.INPUT_SEQS_INVALID,
    ),
    BadPayload(
        "tool.result id differs",
        "tool.result",
        {"toolCallId": "call-2", "content": []},
        PayloadRule.TOOL_CALL_ID_MISMATCH,
        key="call-1",
    ),
    BadPayload(
        "tool.result without toolCallId",
        "tool.result",
        {"content": []},
        PayloadRule.TOOL_CALL_ID_MISMATCH,
        key="call-1",
    ),
    BadPayload("run.finished no status", "run.finished", {}, PayloadRule.STATUS_INVALID),
    BadPayload(
        "run.finished status ok", "run.finished", {"status": "ok"}, PayloadRule.STATUS_INVALID
    ),
    BadPayload(
        "run.finished turns -1",
        "run.finished",
        {"status": "done", "turns": -1},
        PayloadRule.COUNTER_INVALID,
    ),
    BadPayload(
        "run.finished durationMs float",
        "run.finished",
        {"status": "done", "durationMs": 2.5},
        PayloadRule.COUNTER_INVALID,
    ),
    BadPayload(
        "run.finished tokens negative",
        "run.finished",
        {"status": "done", "tokens": {"input": -3}},
        PayloadRule.COUNTER_INVALID,
    ),
    BadPayload(
        "run.finished toolTimings null",
        "run.finished",
        {"status": "done", "toolTimings": None},
        PayloadRule.TOOL_TIMINGS_INVALID,
    ),
    BadPayload(
        "run.finished toolTimings of numbers",
        "run.finished",
        {"status": "done", "toolTimings": [1, 2]},
        PayloadRule.TOOL_TIMINGS_INVALID,
    ),
    BadPayload(
        "external without backend",
        "external.event",
        {"externalRef": "r1"},
        PayloadRule.BACKEND_MISSING,
    ),
    BadPayload(
        "external without externalRef",
        "external.event",
        {"backend": "dsh"},
        PayloadRule.EXTERNAL_REF_MISSING,
    ),
    BadPayload(
        "external stateOwner keel",
        "external.event",
        {"backend": "dsh", "externalRef": "r1", "stateOwner": "keel"},
        PayloadRule.STATE_OWNER_INVALID,
    ),
    BadPayload(
        "NUL in a string", "user.message", {"text": "a\u0000b"}, PayloadRule.PAYLOAD_NOT_JSON
    ),
    BadPayload(
        "integer beyond 64 bits", "compaction", {"tokens": 2**70}, PayloadRule.PAYLOAD_NOT_JSON
    ),
    BadPayload(
        "approval without digest",
        "assistant.message",
        {"content": [{**call(), "approval": {"decisionId": "call-1", "outcomes": ["approve"]}}]},
        PayloadRule.APPROVAL_INVALID,
    ),
    BadPayload(
        "decision under another key",
        "user.message",
        {
            "requestId": "r-1",
            "decision": {"id": "call-1", "outcome": "approve", "argsDigest": "sha256:0"},
        },
        PayloadRule.DECISION_INVALID,
        key="r-1",
    ),
)
