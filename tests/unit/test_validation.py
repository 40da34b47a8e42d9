from __future__ import annotations

from typing import Any

import pytest

from keel_stream.errors import InvalidPayload, PayloadRule
from keel_stream.kernel import Kind, validate_payload
from tests.support.payloads import BAD_PAYLOADS, BadPayload, call

# A toolCallId that differs from the request's key is decided by prepare() (test_commits).
PAYLOAD_ONLY_CASES = [
    c
    for c in BAD_PAYLOADS
    if not (c.rule is PayloadRule.TOOL_CALL_ID_MISMATCH and "toolCallId" in c.payload)
]


@pytest.mark.parametrize("case", PAYLOAD_ONLY_CASES, ids=lambda c: c.name)
def test_bad_payload_is_refused_with_its_code(case: BadPayload) -> None:
    with pytest.raises(InvalidPayload) as info:
        validate_payload(Kind(case.kind), case.payload)
    assert info.value.error_code == case.rule.value


def test_every_payload_rule_has_a_case() -> None:
    covered = {case.rule for case in BAD_PAYLOADS} | {PayloadRule.TOOL_CALL_NOT_FOUND}
    assert covered | {PayloadRule.PAYLOAD_NOT_OBJECT} == set(PayloadRule)


@pytest.mark.parametrize("payload", [[], "text", 3, None])
def test_payload_must_be_an_object(payload: Any) -> None:
    with pytest.raises(InvalidPayload) as info:
        validate_payload(Kind.COMPACTION, payload)
    assert info.value.error_code == "payload_not_object"


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        (Kind.USER_MESSAGE, {}),
        (Kind.USER_MESSAGE, {"text": "hi", "delivery": "guide", "selection": {}, "retryOf": 0}),
        (Kind.USER_MESSAGE, {"text": "hi", "meta": {"anything": [1, "x"]}, "client": "web"}),
        (Kind.ASSISTANT_MESSAGE, {"content": [call("a", "x"), call("b", "x")], "inputSeqs": []}),
        (Kind.ASSISTANT_MESSAGE, {"role": "assistant", "stopReason": "end_turn"}),
        (Kind.TOOL_RESULT, {"toolCallId": "c1"}),
        (Kind.RUN_FINISHED, {"status": "cancelled", "turns": 0, "toolTimings": []}),
        (Kind.RUN_FINISHED, {"status": "done", "tokens": {"input": 3, "output": 4}}),
        (Kind.RUN_FINISHED, {"status": "failed", "tokens": 7, "durationMs": 24}),
        (Kind.EXTERNAL_EVENT, {"backend": "dsh", "externalRef": "r", "stateOwner": "external"}),
        (Kind.COMPACTION, {"summary": "..."}),
        (Kind.RUN_STARTED, {}),
    ],
)
def test_valid_payloads_pass(kind: Kind, payload: dict[str, Any]) -> None:
    validate_payload(kind, payload)


def test_deeply_nested_payload_is_refused_not_crashed() -> None:
    payload: dict[str, Any] = {}
    inner = payload
    for _ in range(2000):
        inner["x"] = {}
        inner = inner["x"]
    with pytest.raises(InvalidPayload) as info:
        validate_payload(Kind.USER_MESSAGE, payload)
    assert info.value.error_code == "payload_not_json"
