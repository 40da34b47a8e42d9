"""The hook mapping: a pure fold of a session's committed events (docs/hooks.md)."""

from __future__ import annotations

from typing import Any

from keel_stream.hooks import HOOK_NAMES
from keel_stream.hooks.derive import FoldState, fold_many
from keel_stream.kernel.types import Event


def _events(*specs: tuple[str, dict[str, Any]]) -> list[Event]:
    return [
        Event(
            tenant="acme",
            session="s1",
            seq=seq,
            kind=kind,
            payload=payload,
            committed_at="2026-12-04T10:00:00Z",
        )
        for seq, (kind, payload) in enumerate(specs, start=1)
    ]


def _hooks(events: list[Event], native: bool = True) -> list[tuple[str, int, str]]:
    _, derived = fold_many(FoldState(), events, native=native)
    return [(hook.name, hook.seq, hook.decision_id) for _, hook in derived]


def _call(call_id: str, approval: bool = False) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "toolCall", "id": call_id, "name": "shell", "arguments": {}}
    if approval:
        block["approval"] = {
            "decisionId": call_id,
            "argsDigest": "sha256:00",
            "outcomes": ["approve", "edit", "reject", "respond"],
            "expiresAt": "2026-12-05T10:00:00Z",
            "onExpire": "reject",
        }
    return block


def _answer(stop: str, *calls: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    content = [{"type": "text", "text": "…"}, *calls]
    return "assistant.message", {"content": content, "stopReason": stop, "inputSeqs": [1]}


def _decision(call_id: str, outcome: str) -> tuple[str, dict[str, Any]]:
    decision = {"id": call_id, "outcome": outcome, "argsDigest": "sha256:00", "answeredBy": "k"}
    return "user.message", {"requestId": f"decision:{call_id}", "decision": decision}


USER = ("user.message", {"text": "hi"})
RESULT_1 = ("tool.result", {"toolCallId": "call_1", "content": []})
RESULT_2 = ("tool.result", {"toolCallId": "call_2", "content": []})
FINISHED = ("run.finished", {"status": "done", "turns": 2})


def test_the_names_emitted() -> None:
    assert set(HOOK_NAMES) >= {
        "turn.started",
        "turn.finished",
        "decision.opened",
        "decision.answered",
    }


def test_a_tool_turn_is_two_model_requests() -> None:
    events = _events(
        USER, _answer("tool_use", _call("call_1"), _call("call_2")), RESULT_1, RESULT_2,
        _answer("end_turn"), FINISHED,
    )  # fmt: skip
    assert _hooks(events) == [
        ("turn.started", 1, ""),
        ("turn.finished", 2, ""),
        ("turn.started", 4, ""),  # the result that completes the answer's calls
        ("turn.finished", 5, ""),
    ]


def test_input_while_a_turn_is_open_starts_no_second_turn() -> None:
    events = _events(USER, USER, _answer("end_turn"), USER, _answer("end_turn"))
    assert _hooks(events) == [
        ("turn.started", 1, ""),
        ("turn.finished", 3, ""),
        ("turn.started", 4, ""),
        ("turn.finished", 5, ""),
    ]


def test_an_error_answer_keeps_a_turn_due_and_aborted_does_not() -> None:
    events = _events(USER, _answer("error"), _answer("end_turn"), USER, _answer("aborted"))
    assert _hooks(events) == [
        ("turn.started", 1, ""),
        ("turn.finished", 2, ""),
        ("turn.started", 2, ""),  # the run retries: the next request is due at once
        ("turn.finished", 3, ""),
        ("turn.started", 4, ""),
        ("turn.finished", 5, ""),
    ]
    state, _ = fold_many(FoldState(), events)
    assert state.open is False


def test_an_answer_with_no_turn_open_gets_its_own_start() -> None:
    events = _events(_answer("end_turn"), _answer("end_turn"))
    assert _hooks(events) == [
        ("turn.started", 1, ""),
        ("turn.finished", 1, ""),
        ("turn.started", 2, ""),
        ("turn.finished", 2, ""),
    ]


def test_every_finished_has_exactly_one_started_before_it() -> None:
    events = _events(
        _answer("end_turn"), USER, USER, _answer("tool_use", _call("call_1")), USER, RESULT_1,
        _answer("error"), _answer("end_turn"), FINISHED, USER, _answer("aborted"),
    )  # fmt: skip
    open_turns = 0
    for name, _, _ in _hooks(events):
        if name == "turn.started":
            assert open_turns == 0
            open_turns += 1
        elif name == "turn.finished":
            assert open_turns == 1
            open_turns -= 1


def _result(call_id: str, outcome: str | None = None) -> tuple[str, dict[str, Any]]:
    payload: dict[str, Any] = {"toolCallId": call_id, "content": []}
    if outcome is not None:
        payload["decision"] = {"id": call_id, "outcome": outcome, "answerSeq": 3}
    return "tool.result", payload


def test_gated_calls_open_decisions_and_their_results_make_the_request_due() -> None:
    events = _events(
        USER,
        _answer("tool_use", _call("call_1", approval=True), _call("call_2")),
        RESULT_2,
        _decision("call_1", "reject"),
        _result("call_1", "reject"),  # answered without running: the model is asked again
        _answer("end_turn"),
    )
    assert _hooks(events) == [
        ("turn.started", 1, ""),
        ("turn.finished", 2, ""),
        ("decision.opened", 2, "call_1"),
        ("decision.answered", 4, "call_1"),
        ("turn.started", 5, ""),
        ("turn.finished", 6, ""),
    ]
    state, _ = fold_many(FoldState(), events[:4])
    assert state.gated == {"call_1"}
    assert state.answered == {"call_1"}
    assert state.results == {"call_2"}


def test_an_approved_call_is_due_after_its_result() -> None:
    events = _events(
        USER,
        _answer("tool_use", _call("call_1", approval=True)),
        _decision("call_1", "approve"),
        _result("call_1", "approve"),
        _answer("end_turn"),
    )
    assert _hooks(events) == [
        ("turn.started", 1, ""),
        ("turn.finished", 2, ""),
        ("decision.opened", 2, "call_1"),
        ("decision.answered", 3, "call_1"),
        ("turn.started", 4, ""),
        ("turn.finished", 5, ""),
    ]


def test_a_cancelled_decision_stops_the_run_and_starts_no_turn() -> None:
    events = _events(
        USER,
        _answer("tool_use", _call("call_1", approval=True)),
        _decision("call_1", "cancel"),
        _result("call_1", "cancel"),
        USER,
    )
    assert _hooks(events)[-2:] == [("decision.answered", 3, "call_1"), ("turn.started", 5, "")]


def test_a_call_closed_by_the_runs_cancel_starts_no_turn() -> None:
    from keel_stream.worker.calls import cancelled_result

    events = _events(
        USER,
        _answer("tool_use", _call("call_1")),
        ("tool.result", cancelled_result({"id": "call_1"})),
        FINISHED,
        USER,
    )
    starts = [h for h in _hooks(events) if h[0] == "turn.started"]
    assert starts == [("turn.started", 1, ""), ("turn.started", 5, "")]


def test_a_decision_is_not_an_input() -> None:
    events = _events(USER, _answer("end_turn"), _decision("call_9", "approve"))
    assert _hooks(events)[-1] == ("decision.answered", 3, "call_9")
    assert [h for h in _hooks(events) if h[0] == "turn.started"] == [("turn.started", 1, "")]


def test_hook_data_is_thin_and_exact() -> None:
    events = _events(
        USER,
        (
            "assistant.message",
            {
                "generationId": "g1",
                "stopReason": "tool_use",
                "inputSeqs": [1],
                "usage": {"input": 3},
                "content": [_call("call_1", approval=True)],
            },
        ),
        _decision("call_1", "respond"),
    )
    _, derived = fold_many(FoldState(), events)
    data: dict[str, dict[str, Any]] = {}
    for _, hook in derived:
        data.setdefault(hook.name, dict(hook.data))  # the first of each name
    assert data["turn.finished"] == {
        "generationId": "g1",
        "stopReason": "tool_use",
        "inputSeqs": [1],
        "usage": {"input": 3},
    }
    assert data["decision.opened"]["decisionId"] == "call_1"
    assert data["decision.opened"]["outcomes"] == ["approve", "edit", "reject", "respond"]
    assert data["decision.opened"]["arguments"] == {}
    assert data["decision.answered"]["outcome"] == "respond"
    assert data["decision.answered"]["requestId"] == "decision:call_1"
    assert data["turn.started"] == {"cause": "input"}


def test_external_sessions_emit_no_turns() -> None:
    events = _events(USER, ("external.event", {"type": "x"}), _answer("end_turn"))
    assert _hooks(events, native=False) == []


def test_the_state_survives_being_stored() -> None:
    events = _events(USER, _answer("tool_use", _call("call_1", approval=True), _call("call_2")))
    state, _ = fold_many(FoldState(), events)
    assert FoldState.load(state.dump()) == state
    rest = _events(USER, USER, RESULT_2, _decision("call_1", "reject"))[2:]
    rest = [e.model_copy(update={"seq": e.seq + 2}) for e in rest]
    stored, first = fold_many(FoldState.load(state.dump()), rest)
    direct, second = fold_many(state, rest)
    assert stored == direct
    assert [h for _, h in first] == [h for _, h in second]
