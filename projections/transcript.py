"""The transcript: the derived message history of a session.

Two views of one fold: `entries`, the full record (user messages, assistant messages with their
tool calls, tool results paired with their call, compactions, external events; run summaries
skipped), and `context`, the messages a model is given: terminal failed answers (stopReason error
or aborted) are left out, and a compaction replaces everything before it with its summary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from keel_stream.kernel.inputs import is_terminal_failure
from keel_stream.kernel.validation import tool_call_blocks
from keel_stream.kernel.vocabulary import Kind
from projections.base import EventLike

__all__ = ["TRANSCRIPT", "TranscriptProjection", "TranscriptState"]

Entry = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class TranscriptState:
    entries: tuple[Entry, ...] = ()
    context: tuple[Entry, ...] = ()
    calls: Mapping[str, str] = field(default_factory=dict)
    """toolCallId -> tool name, to pair results with their call."""


def _user(state: TranscriptState, event: EventLike) -> TranscriptState:
    p = event.payload
    entry = {
        "seq": event.seq,
        "kind": event.kind,
        "text": p.get("text"),
        "delivery": p.get("delivery", "queue"),
        "requestId": p.get("requestId"),
    }
    message = {"role": "user", "seq": event.seq, "content": p.get("text")}
    return replace(state, entries=(*state.entries, entry), context=(*state.context, message))


def _assistant(state: TranscriptState, event: EventLike) -> TranscriptState:
    p = event.payload
    failed = is_terminal_failure(p)
    calls = {**state.calls}
    for block in tool_call_blocks(p):
        calls[str(block["id"])] = str(block["name"])
    entry = {
        "seq": event.seq,
        "kind": event.kind,
        "content": p.get("content", []),
        "stopReason": p.get("stopReason"),
        "inputSeqs": p.get("inputSeqs"),
        "failed": failed,
    }
    context = state.context
    if not failed:
        message = {
            "role": "assistant",
            "seq": event.seq,
            "content": p.get("content", []),
            "stopReason": p.get("stopReason"),
        }
        context = (*context, message)
    return replace(state, entries=(*state.entries, entry), context=context, calls=calls)


def _tool_result(state: TranscriptState, event: EventLike) -> TranscriptState:
    p = event.payload
    call_id = str(p.get("toolCallId"))
    paired = {
        "toolCallId": call_id,
        "toolName": state.calls.get(call_id),
        "content": p.get("content", []),
        "isError": bool(p.get("isError", False)),
    }
    entry = {"seq": event.seq, "kind": event.kind, **paired}
    message = {"role": "toolResult", "seq": event.seq, **paired}
    return replace(state, entries=(*state.entries, entry), context=(*state.context, message))


def _compaction(state: TranscriptState, event: EventLike) -> TranscriptState:
    p = event.payload
    summary = p.get("summary")
    entry = {"seq": event.seq, "kind": event.kind, "summary": summary}
    first_kept = p.get("firstKeptSeq")
    kept = (
        tuple(m for m in state.context if m["seq"] >= first_kept)
        if isinstance(first_kept, int)
        else ()
    )
    message = {"role": "summary", "seq": event.seq, "content": summary}
    return replace(state, entries=(*state.entries, entry), context=(message, *kept))


def _external(state: TranscriptState, event: EventLike) -> TranscriptState:
    p = event.payload
    entry = {
        "seq": event.seq,
        "kind": event.kind,
        "backend": p.get("backend"),
        "externalRef": p.get("externalRef"),
        "direction": p.get("direction"),
        "payload": dict(p),
    }
    return replace(state, entries=(*state.entries, entry))


_APPLY: Final[Mapping[str, Callable[[TranscriptState, EventLike], TranscriptState]]] = {
    Kind.USER_MESSAGE: _user,
    Kind.ASSISTANT_MESSAGE: _assistant,
    Kind.TOOL_RESULT: _tool_result,
    Kind.COMPACTION: _compaction,
    Kind.EXTERNAL_EVENT: _external,
}


class TranscriptProjection:
    """The transcript fold; run.* events are bookkeeping and are skipped."""

    name = "transcript"

    def initial(self) -> TranscriptState:
        return TranscriptState()

    def apply(self, state: TranscriptState, event: EventLike) -> TranscriptState:
        handler = _APPLY.get(event.kind)
        return handler(state, event) if handler is not None else state

    def dump(self, state: TranscriptState) -> dict[str, Any]:
        return {
            "entries": list(state.entries),
            "context": list(state.context),
            "calls": dict(state.calls),
        }

    def load(self, data: Mapping[str, Any]) -> TranscriptState:
        return TranscriptState(
            entries=tuple(data.get("entries", ())),
            context=tuple(data.get("context", ())),
            calls=dict(data.get("calls", {})),
        )


TRANSCRIPT: Final = TranscriptProjection()
