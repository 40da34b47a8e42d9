"""Hook events as a pure fold of a session's committed events (docs/hooks.md, "The mapping").

A **turn** is one model request: what `run.finished.turns` counts. `turn.finished` is each
committed `assistant.message`; `turn.started` is the committed fact that made that request due:

- a `user.message` without a `decision` field, when no turn is open;
- the `tool.result` that completes the calls of a `tool_use` answer (every toolCall block of
  the latest answer has its result), when no turn is open. A call gated by an `approval` is
  answered by a decision first, but every outcome ends in the call's tool.result (the worker
  runs the call, or answers it without running it), so the result is what makes the request
  due. A result that records a cancel (`cancelled: true`, the run's cancel closing a call; a
  decision `cancel`; a cancelled subagent) stops the run instead: no turn is due;
- an `assistant.message` with stopReason `error`: the run retries, so a new request is due at
  once (turn.finished then turn.started, at the same seq); `aborted` leaves nothing due.

An `assistant.message` that finds no turn open (a legacy log) gets a turn.started of its own
first, so every turn.finished has exactly one turn.started before it. Sessions whose state is
owned by an external backend have no model requests here: they emit no turn.* events.

`decision.opened` is one per `toolCall` block carrying an `approval` object (its decision id is
the call id); `decision.answered` is each `user.message` carrying a `decision` object.

`subagent.started` is one per `delegate` call of a `tool_use` answer (with the child session's
id); `subagent.finished` is that call's one `tool.result` (it carries `subagent`: the child and
its status, or `refused` when no child could be made), so every started has exactly one finished.
A subagent's result reaching its parent (a user.message with `subagentResult`) is not an input.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeVar

from keel_stream.kernel.decisions import released_call
from keel_stream.kernel.subagents import child_session_id, is_delegation
from keel_stream.kernel.types import EventLike

__all__ = ["FoldState", "Hook", "fold", "fold_many"]

E = TypeVar("E", bound=EventLike)

_MAX_INLINE_ARGUMENTS: Final = 16_384
"""A decision.opened carries the call's arguments up to this many bytes of JSON (thin payloads:
a larger one says argumentsOmitted; the event itself is at GET .../events)."""


@dataclass(frozen=True, slots=True)
class Hook:
    """One hook event: its name, the seq of the fact it derives from, and its thin data."""

    name: str
    seq: int
    decision_id: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FoldState:
    """A session's fold: is a turn open, and the latest answer's calls and their state."""

    open: bool = False
    calls: tuple[str, ...] = ()
    results: frozenset[str] = frozenset()
    gated: frozenset[str] = frozenset()
    answered: frozenset[str] = frozenset()
    """Gated calls whose decision is answered."""

    def all_answered(self) -> bool:
        return bool(self.calls) and all(call in self.results for call in self.calls)

    def dump(self) -> dict[str, Any]:
        return {
            "open": self.open,
            "calls": list(self.calls),
            "results": sorted(self.results),
            "gated": sorted(self.gated),
            "answered": sorted(self.answered),
        }

    @classmethod
    def load(cls, document: Mapping[str, Any] | None) -> FoldState:
        if not document:
            return cls()
        return cls(
            open=bool(document.get("open", False)),
            calls=tuple(document.get("calls", ())),
            results=frozenset(document.get("results", ())),
            gated=frozenset(document.get("gated", ())),
            answered=frozenset(document.get("answered", ())),
        )


def _started(state: FoldState, seq: int, cause: str, hooks: list[Hook]) -> FoldState:
    hooks.append(Hook("turn.started", seq, data={"cause": cause}))
    return replace(state, open=True)


def _tool_calls(payload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    content = payload.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == "toolCall"]


def _opened(block: Mapping[str, Any], approval: Mapping[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = {"decisionId": str(block.get("id")), "toolCallId": block.get("id")}
    data["name"] = block.get("name")
    for name in ("argsDigest", "outcomes", "expiresAt", "onExpire"):
        if name in approval:
            data[name] = approval[name]
    arguments = block.get("arguments")
    if len(json.dumps(arguments, default=str)) <= _MAX_INLINE_ARGUMENTS:
        data["arguments"] = arguments
    else:
        data["argumentsOmitted"] = True
    return data


def _finished_data(payload: Mapping[str, Any]) -> dict[str, Any]:
    data = {name: payload.get(name) for name in ("generationId", "stopReason", "inputSeqs")}
    if "usage" in payload:
        data["usage"] = payload["usage"]
    return data


def _answer(state: FoldState, event: EventLike, native: bool, hooks: list[Hook]) -> FoldState:
    payload = event.payload
    if native:
        if not state.open:
            state = _started(state, event.seq, "unmatched", hooks)
        hooks.append(Hook("turn.finished", event.seq, data=_finished_data(payload)))
        state = replace(state, open=False)
    blocks = _tool_calls(payload)
    gated = [(b, b["approval"]) for b in blocks if isinstance(b.get("approval"), dict)]
    for block, approval in gated:
        decision_id = str(block.get("id"))
        hooks.append(Hook("decision.opened", event.seq, decision_id, _opened(block, approval)))
    if payload.get("stopReason") == "tool_use":
        for block in blocks:
            if is_delegation(block):
                call = str(block.get("id"))
                data = {"toolCallId": call, "child": child_session_id(event.session, call)}
                hooks.append(Hook("subagent.started", event.seq, call, data))
    state = replace(
        state,
        calls=tuple(str(b.get("id")) for b in blocks),
        results=frozenset(),
        gated=frozenset(str(b.get("id")) for b, _ in gated),
        answered=frozenset(),
    )
    if native and payload.get("stopReason") == "error":
        state = _started(state, event.seq, "retry", hooks)
    return state


def _decision(
    state: FoldState, event: EventLike, decision: Mapping[str, Any], hooks: list[Hook]
) -> FoldState:
    decision_id = str(decision.get("id"))
    data: dict[str, Any] = {"decisionId": decision_id, "requestId": event.payload.get("requestId")}
    for name in ("outcome", "argsDigest", "answeredBy", "system", "reason"):
        if name in decision:
            data[name] = decision[name]
    hooks.append(Hook("decision.answered", event.seq, decision_id, data))
    if decision_id in state.gated:
        state = replace(state, answered=state.answered | {decision_id})
    return state


def _cancels(payload: Mapping[str, Any]) -> bool:
    """A result recording a cancel (the run's, a decision's `cancel`, a subagent's): the run
    stops rather than asking the model."""
    if payload.get("cancelled") is True:
        return True
    decision = payload.get("decision")
    if isinstance(decision, dict) and decision.get("outcome") == "cancel":
        return True
    subagent = payload.get("subagent")
    return isinstance(subagent, dict) and subagent.get("status") == "cancelled"


def fold(
    state: FoldState, event: EventLike, *, native: bool = True
) -> tuple[FoldState, list[Hook]]:
    """The state after `event` and the hook events it derives, in order."""
    hooks: list[Hook] = []
    payload = event.payload
    if event.kind == "assistant.message":
        return _answer(state, event, native, hooks), hooks
    if event.kind == "user.message":
        decision = payload.get("decision")
        if isinstance(decision, dict):
            state = _decision(state, event, decision, hooks)
        elif released_call(payload) is not None:
            pass  # a subagent's result: its call's tool.result is what counts
        elif native and not state.open:
            state = _started(state, event.seq, "input", hooks)
    elif event.kind == "tool.result":
        call = str(payload.get("toolCallId"))
        subagent = payload.get("subagent")
        if isinstance(subagent, dict):
            data = {
                "toolCallId": call,
                **{k: subagent[k] for k in ("child", "status") if k in subagent},
            }
            data.setdefault("status", "refused")
            hooks.append(Hook("subagent.finished", event.seq, call, data))
        if call in state.calls:
            state = replace(state, results=state.results | {call})
            if native and not state.open and state.all_answered() and not _cancels(payload):
                state = _started(state, event.seq, "toolResults", hooks)
    return state, hooks


def fold_many(
    state: FoldState, events: Sequence[E], *, native: bool = True
) -> tuple[FoldState, list[tuple[E, Hook]]]:
    """Fold events in order; each hook event with the event it derives from."""
    derived: list[tuple[E, Hook]] = []
    for event in events:
        state, hooks = fold(state, event, native=native)
        derived.extend((event, hook) for hook in hooks)
    return state, derived
