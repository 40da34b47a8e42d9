"""The pure rules of decisions: input accounting while waiting, the policy, opening, the fold."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from keel_stream.errors import InvalidPayload
from keel_stream.kernel import Event, Kind, account_inputs, validate_payload
from keel_stream.kernel.decisions import DecisionState, args_digest, decisions_of
from keel_stream.tenancy.document import TenantConfig
from keel_stream.worker.decisions import gate_calls, resolve

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def event(seq: int, kind: str, payload: dict[str, Any]) -> Event:
    return Event(tenant="t", session="s", seq=seq, kind=kind, payload=payload, committed_at=NOW)


def policy(tools: dict[str, Any]) -> TenantConfig:
    return TenantConfig.model_validate({"policy": {"tools": tools}})


def call(call_id: str, name: str = "note", **arguments: Any) -> dict[str, Any]:
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}


def opened(*blocks: dict[str, Any], tools: dict[str, Any] | None = None) -> list[Event]:
    config = policy(tools or {"note": {"approval": "always"}})
    content = gate_calls(blocks, config.policy, NOW)
    return [
        event(1, Kind.USER_MESSAGE, {"text": "go"}),
        event(2, Kind.ASSISTANT_MESSAGE,
              {"content": content, "stopReason": "tool_use", "inputSeqs": [1]}),
    ]  # fmt: skip


def answer(seq: int, decision_id: str, outcome: str = "approve") -> Event:
    payload = {"requestId": f"decision:{decision_id}",
               "decision": {"id": decision_id, "outcome": outcome, "argsDigest": "x"}}  # fmt: skip
    return event(seq, Kind.USER_MESSAGE, payload)


def test_a_session_whose_calls_all_wait_on_decisions_owes_nothing() -> None:
    log = opened(call("c1"), call("c2", name="echo"))
    assert account_inputs(log).needs_turn, "the ungated sibling has no result yet"
    log.append(event(3, Kind.TOOL_RESULT, {"toolCallId": "c2", "content": []}))
    account = account_inputs(log)
    assert (account.waiting, account.owed_turn, account.needs_turn) == (True, False, False)
    assert account.open_decisions == ("c1",)
    log.append(event(4, Kind.USER_MESSAGE, {"text": "meanwhile"}))
    assert not account_inputs(log).needs_turn, "no model request while a call waits"
    log.append(answer(5, "c1"))
    account = account_inputs(log)
    assert (account.waiting, account.owed_turn, account.unanswered) == (False, True, (4,))


def test_a_decision_answer_is_never_an_input() -> None:
    log = [*opened(call("c1")), answer(3, "c1")]
    assert account_inputs(log).unanswered == ()


def test_the_policy_gates_by_its_conditions_and_star() -> None:
    rules = {
        "note": {"approval": {"when": [{"argument": "/path", "matches": "^/prod/"},
                                       {"argument": "/force", "equals": True}]}},
        "*": {"approval": "always", "outcomes": ["approve"]},
    }  # fmt: skip
    gated = policy(rules).policy
    assert gated.for_call("note", {"path": "/prod/db"}) is not None
    assert gated.for_call("note", {"path": "/dev/db", "force": True}) is not None
    assert gated.for_call("note", {"path": "/dev/db"}) is None
    assert gated.for_call("other", {}) is not None, "* covers tools without an entry"
    assert policy({}).policy.for_call("note", {}) is None


def test_an_opened_approval_binds_the_call_and_passes_the_kernel() -> None:
    _, message = opened(call("c1", text="hi"), call("c2", name="echo"))
    first, second = message.payload["content"]
    assert first["approval"]["argsDigest"] == args_digest({"text": "hi"})
    assert first["approval"]["expiresAt"] == "2026-12-11T12:00:00Z"
    assert "approval" not in second
    validate_payload(Kind.ASSISTANT_MESSAGE, message.payload)
    tampered = {**first, "arguments": {"text": "other"}}
    with pytest.raises(InvalidPayload) as refused:
        validate_payload(Kind.ASSISTANT_MESSAGE, {"content": [tampered]})
    assert refused.value.error_code == "approval_invalid"


def test_the_fold_follows_each_decision_to_its_result() -> None:
    log = [*opened(call("c1"), call("c2")), answer(3, "c1", "reject")]
    log.append(event(4, Kind.TOOL_RESULT, {"toolCallId": "c1", "content": []}))
    found = decisions_of(log)
    assert [d.state for d in found.values()] == [DecisionState.RESOLVED, DecisionState.OPEN]
    assert found["c1"].answer_seq == 3


@pytest.mark.parametrize(
    ("given", "runs", "text", "is_error"),
    [
        ({"outcome": "approve"}, {"text": "a"}, "", False),
        ({"outcome": "edit", "args": {"text": "b"}}, {"text": "b"}, "", False),
        ({"outcome": "reject", "reason": "no"}, None, "rejected: no", True),
        ({"outcome": "respond", "response": "42"}, None, "42", False),
        ({"outcome": "cancel", "system": True}, None,
         "cancelled: the decision expired unanswered", True),
    ],
)  # fmt: skip
def test_each_outcome_resolves_its_call(
    given: dict[str, Any], runs: dict[str, Any] | None, text: str, is_error: bool
) -> None:
    resolution = resolve(call("c1", text="a"), 7, given)
    assert resolution.arguments == runs
    assert (resolution.text, resolution.is_error) == (text, is_error)
    assert resolution.cancel == (given["outcome"] == "cancel")
    assert resolution.provenance["answerSeq"] == 7
