"""Projections are pure folds: pieces, duplicates and redeliveries change nothing."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keel_stream.projections import (
    ALL,
    RUN_STATUS,
    TRANSCRIPT,
    Folded,
    Projection,
    SeqGap,
    fold,
    render_frame,
    step,
)


@dataclass(frozen=True)
class Ev:
    seq: int
    kind: str
    payload: dict[str, Any] = field(default_factory=dict)
    tenant: str = "acme"
    session: str = "s1"


def user(seq: int, text: str = "hi") -> Ev:
    return Ev(seq, "user.message", {"text": text, "requestId": f"r{seq}"})


def assistant(seq: int, inputs: list[int], stop: str = "end_turn", calls: int = 0) -> Ev:
    content: list[dict[str, Any]] = [{"type": "text", "text": f"answer {seq}"}]
    content += [
        {"type": "toolCall", "id": f"c{seq}-{i}", "name": "echo", "arguments": {}}
        for i in range(calls)
    ]
    return Ev(
        seq, "assistant.message", {"content": content, "inputSeqs": inputs, "stopReason": stop}
    )


# A random, well-formed session log: inputs, answers (some failing, some calling tools),
# tool results for the calls, compactions, run summaries.
@st.composite
def session_logs(draw: st.DrawFn) -> list[Ev]:
    log: list[Ev] = []
    pending_inputs: list[int] = []
    open_calls: list[str] = []
    for _ in range(draw(st.integers(1, 40))):
        seq = len(log) + 1
        choice = draw(st.sampled_from(["user", "assistant", "tool", "compaction", "finished"]))
        if choice == "user" or not log:
            log.append(user(seq, draw(st.text(max_size=8))))
            pending_inputs.append(seq)
        elif choice == "assistant":
            stop = draw(st.sampled_from(["end_turn", "tool_use", "error", "aborted"]))
            calls = draw(st.integers(0, 2)) if stop == "tool_use" else 0
            event = assistant(seq, list(pending_inputs), stop, calls)
            log.append(event)
            if stop not in ("error", "aborted"):
                pending_inputs = []
            open_calls += [b["id"] for b in event.payload["content"] if b["type"] == "toolCall"]
        elif choice == "tool" and open_calls:
            log.append(Ev(seq, "tool.result", {"toolCallId": open_calls.pop(0), "content": []}))
        elif choice == "compaction":
            first_kept = draw(st.none() | st.integers(1, seq))
            payload: dict[str, Any] = {"summary": f"summary at {seq}"}
            if first_kept is not None:
                payload["firstKeptSeq"] = first_kept
            log.append(Ev(seq, "compaction", payload))
        else:
            log.append(Ev(seq, "run.finished", {"status": "done", "turns": 1, "durationMs": 3}))
    return log


def roundtrip(projection: Projection[Any], folded: Folded[Any]) -> Folded[Any]:
    """What storing the state in PostgreSQL (as JSON) and loading it again does."""
    data = json.loads(json.dumps(projection.dump(folded.state)))
    return Folded(folded.last_seq, projection.load(data))


@settings(max_examples=150, deadline=None)
@given(log=session_logs(), data=st.data())
@pytest.mark.parametrize("projection", ALL, ids=lambda p: p.name)
def test_fold_in_pieces_with_duplicates_equals_fold_of_whole_log(
    projection: Projection[Any], log: list[Ev], data: st.DataObject
) -> None:
    whole = fold(projection, log)
    cuts = sorted(data.draw(st.sets(st.integers(0, len(log)), max_size=5)))
    folded: Folded[Any] = Folded(0, projection.initial())
    start = 0
    for cut in [*cuts, len(log)]:
        piece = log[start:cut]
        # Redeliveries: some already-applied events again, duplicates inside the piece.
        replay = data.draw(st.lists(st.sampled_from(log[:cut]), max_size=5)) if cut else []
        shuffled_dupes = (
            piece + data.draw(st.lists(st.sampled_from(piece), max_size=3)) if piece else []
        )
        folded = fold(projection, replay + shuffled_dupes, start=folded) if cut else folded
        folded = roundtrip(projection, folded)
        start = cut
    assert folded.last_seq == whole.last_seq
    assert projection.dump(folded.state) == projection.dump(whole.state)


def test_a_gap_is_refused() -> None:
    folded = fold(TRANSCRIPT, [user(1)])
    with pytest.raises(SeqGap) as info:
        step(TRANSCRIPT, folded, user(3))
    assert (info.value.first, info.value.last_missing) == (2, 2)


def test_transcript_views() -> None:
    log = [
        user(1, "hello"),
        assistant(2, [1], "tool_use", calls=1),
        Ev(3, "tool.result", {"toolCallId": "c2-0", "content": [{"type": "text", "text": "ok"}]}),
        assistant(4, [], "error"),
        Ev(5, "run.finished", {"status": "failed"}),
        user(6, "again"),
        assistant(7, [6]),
    ]
    state = fold(TRANSCRIPT, log).state
    assert [e["seq"] for e in state.entries] == [1, 2, 3, 4, 6, 7]
    assert state.entries[3]["failed"] is True
    assert state.entries[2]["toolName"] == "echo"
    assert [m["seq"] for m in state.context] == [1, 2, 3, 6, 7]
    assert [m["role"] for m in state.context] == [
        "user", "assistant", "toolResult", "user", "assistant",
    ]  # fmt: skip


def test_compaction_replaces_earlier_context() -> None:
    log = [
        user(1),
        assistant(2, [1]),
        user(3),
        Ev(4, "compaction", {"summary": "s", "firstKeptSeq": 3}),
    ]
    state = fold(TRANSCRIPT, log).state
    assert [(m["role"], m["seq"]) for m in state.context] == [("summary", 4)]
    assert [(m["role"], m["seq"]) for m in state.model_view] == [("summary", 4), ("user", 3)]
    assert len(state.entries) == 4


def test_compaction_keeps_the_suffix_from_first_kept_seq() -> None:
    log = [
        user(1),
        assistant(2, [1], "tool_use", calls=1),
        user(3, "guide"),
        Ev(4, "tool.result", {"toolCallId": "c2-0"}),
        assistant(5, [3]),
        user(6),
        assistant(7, [6]),
        Ev(8, "compaction", {"summary": "s", "firstKeptSeq": 3}),
    ]
    state = fold(TRANSCRIPT, log).state
    # The guide (seq 3) was presented after the tool result (seq 4): the kept suffix starts at
    # the guide's place in the model's view, so the result is not kept without its call.
    assert [m["seq"] for m in state.model_view] == [8, 3, 5, 6, 7]


def test_inputs_are_placed_where_the_request_presented_them() -> None:
    log = [
        user(1, "use a tool"),
        assistant(2, [1], "tool_use", calls=1),
        user(3, "a guide, committed while the tool ran"),
        Ev(4, "tool.result", {"toolCallId": "c2-0"}),
        user(5, "queued while the model answered"),
        assistant(6, [3]),
    ]
    state = fold(TRANSCRIPT, log).state
    assert [m["seq"] for m in state.context] == [1, 2, 4, 3, 6]
    assert [m["seq"] for m in state.waiting] == [5]
    assert [e["seq"] for e in state.entries] == [1, 2, 3, 4, 5, 6]


def test_failed_answers_place_nothing_and_legacy_answers_place_everything() -> None:
    failed = fold(TRANSCRIPT, [user(1), assistant(2, [1], "error")]).state
    assert (failed.context, [m["seq"] for m in failed.waiting]) == ((), [1])
    legacy_answer = Ev(3, "assistant.message", {"content": [], "stopReason": "end_turn"})
    legacy = fold(TRANSCRIPT, [user(1), user(2), legacy_answer]).state
    assert [m["seq"] for m in legacy.context] == [1, 2, 3]
    assert legacy.waiting == ()


def test_external_events_are_entries_not_context() -> None:
    log = [Ev(1, "external.event", {"backend": "dsh", "externalRef": "r", "direction": "in"})]
    state = fold(TRANSCRIPT, log).state
    assert state.entries[0]["backend"] == "dsh"
    assert state.context == ()


def test_run_status() -> None:
    log = [
        user(1),
        assistant(2, [1], "tool_use", calls=1),
        Ev(3, "tool.result", {"toolCallId": "c2-0"}),
        assistant(4, [], "error"),
        Ev(5, "run.finished", {"status": "failed", "turns": 2, "durationMs": 9, "error": "boom"}),
    ]
    view = RUN_STATUS.dump(fold(RUN_STATUS, log).state)
    assert view["status"] == "failed"
    assert view["attempts"] == 1
    assert (view["turns"], view["durationMs"], view["error"]) == (2, 9, "boom")
    assert view["unansweredInputs"] == []
    assert view["owedTurn"] is True


def test_sse_frame() -> None:
    frame = render_frame(user(7, "x"), "2026-11-30T00:00:00Z")
    assert (frame.id, frame.event) == (7, "user.message")
    assert frame.data["payload"]["text"] == "x"
    assert frame.data["seq"] == 7


@settings(max_examples=100, deadline=None)
@given(log=session_logs(), data=st.data())
@pytest.mark.parametrize("projection", ALL, ids=lambda p: p.name)
def test_apply_many_equals_apply_one_by_one(
    projection: Projection[Any], log: list[Ev], data: st.DataObject
) -> None:
    one_by_one: Folded[Any] = Folded(0, projection.initial())
    for event in log:
        one_by_one = step(projection, one_by_one, event)
    split = data.draw(st.integers(0, len(log)))
    state = projection.apply_many(projection.initial(), log[:split])
    state = projection.apply_many(state, log[split:])
    assert projection.dump(state) == projection.dump(one_by_one.state)
