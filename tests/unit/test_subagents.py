"""The pure rules of subagents: waiting on a child, its result not an input, the tools a child
is offered, and hooks paired started/finished."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from keel_stream.hooks.derive import FoldState, fold_many
from keel_stream.kernel import Event, Kind, account_inputs
from keel_stream.kernel.subagents import DELEGATE, child_session_id
from keel_stream.store.memory import MemoryStore
from keel_stream.store.subagents import MemorySubagents
from keel_stream.tenancy.policy import SubagentSettings
from keel_stream.worker.providers.base import ToolSpec
from keel_stream.worker.subagents import Delegations, offered_tools

NOW = datetime(2026, 12, 4, tzinfo=UTC)


def event(seq: int, kind: str, payload: dict[str, Any], session: str = "p") -> Event:
    return Event(tenant="t", session=session, seq=seq, kind=kind, payload=payload,
                 committed_at=NOW)  # fmt: skip


def delegating() -> list[Event]:
    calls = [{"type": "toolCall", "id": c, "name": DELEGATE, "arguments": {"task": c}}
             for c in ("c1", "c2")]  # fmt: skip
    return [
        event(1, Kind.USER_MESSAGE, {"text": "go"}),
        event(2, Kind.ASSISTANT_MESSAGE,
              {"content": calls, "stopReason": "tool_use", "inputSeqs": [1]}),
    ]  # fmt: skip


def result_of(seq: int, call: str) -> Event:
    report = {"toolCallId": call, "child": child_session_id("p", call), "status": "done",
              "text": "ok"}  # fmt: skip
    return event(seq, Kind.USER_MESSAGE,
                 {"requestId": f"subagent:{call}", "subagentResult": report})  # fmt: skip


def test_a_parent_waits_on_its_children_and_their_results_are_not_inputs() -> None:
    log = delegating()
    assert account_inputs(log).waiting
    log.append(result_of(3, "c1"))
    account = account_inputs(log)
    assert (account.waiting, account.unanswered) == (False, ())
    assert (account.open_decisions, account.running_subagents) == ((), ("c2",))


def test_the_child_id_is_the_same_for_every_worker() -> None:
    assert child_session_id("p", "c1") == child_session_id("p", "c1")
    assert child_session_id("p", "c1") != child_session_id("p", "c2")


def test_a_child_is_offered_delegate_below_the_depth_limit_and_only_its_tools() -> None:
    specs = [ToolSpec("note", "", {}), ToolSpec("echo", "", {})]
    limits = SubagentSettings.model_validate({"maxDepth": 2})
    root = offered_tools(specs, [], limits, delegating=True)
    assert [s.name for s in root] == ["note", "echo", DELEGATE]
    link = {"parent": "p", "toolCallId": "c1", "depth": 2, "root": "p", "tools": ["echo"]}
    child = [event(1, Kind.USER_MESSAGE, {"text": "t", "subagent": link}, session="k")]
    assert [s.name for s in offered_tools(specs, child, limits, delegating=True)] == ["echo"]


def test_each_subagent_started_has_one_finished() -> None:
    log = [*delegating(), result_of(3, "c1"), result_of(4, "c2")]
    for seq, call in ((5, "c1"), (6, "c2")):
        log.append(event(seq, Kind.TOOL_RESULT, {
            "toolCallId": call, "content": [], "subagent": {"child": "x", "status": "done"},
        }))  # fmt: skip
    _, derived = fold_many(FoldState(), log)
    names = [(hook.name, hook.decision_id) for _, hook in derived if "subagent" in hook.name]
    assert names == [
        ("subagent.started", "c1"), ("subagent.started", "c2"),
        ("subagent.finished", "c1"), ("subagent.finished", "c2"),
    ]  # fmt: skip
    turns = [hook.name for _, hook in derived if hook.name.startswith("turn.")]
    assert turns == ["turn.started", "turn.finished", "turn.started"], "results are not inputs"


async def test_a_delegate_call_over_a_limit_is_refused_by_name_and_never_raises() -> None:
    """Over maxPerTree or maxDepth a call gets the error result naming the limit, never an
    exception; a call whose child was never made reads as not started; a call repeated by a
    takeover keeps its child even in a full tree."""
    store = MemoryStore()
    await store.create_tenant("t")
    delegations = Delegations(store, MemorySubagents())
    limits = SubagentSettings.model_validate({"maxDepth": 1, "maxPerTree": 1})
    first, second = ({"id": c, "name": DELEGATE, "arguments": {"task": c}} for c in ("c1", "c2"))
    assert await delegations.ensure("t", "p", first, [], limits) is None
    refused = await delegations.ensure("t", "p", second, [], limits)
    assert refused is not None
    assert (refused.is_error, refused.provenance) == (True, {"refused": "maxPerTree"})
    assert "maxPerTree (1)" in refused.text
    assert await delegations.started("t", "p", second) is False
    assert await delegations.ensure("t", "p", first, [], limits) is None, "a takeover's repeat"
    child_log = await store.read_events("t", child_session_id("p", "c1"))
    deeper = await delegations.ensure("t", child_session_id("p", "c1"), first, child_log, limits)
    assert deeper is not None
    assert deeper.provenance == {"refused": "maxDepth"}
