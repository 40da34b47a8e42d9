"""The transcript: the derived message history of a session.

Two views of one fold: `entries`, the full record (user messages, assistant messages with their
tool calls, tool results paired with their call, compactions, external events; run summaries
skipped), and `context`, the messages a model is given: terminal failed answers (stopReason error
or aborted) are left out, and a compaction replaces everything before it with its summary.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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


@dataclass(slots=True)
class _Builder:
    """A transcript being extended: mutable lists, frozen into a TranscriptState at the end."""

    entries: list[Entry]
    context: list[Entry]
    calls: dict[str, str]

    @classmethod
    def of(cls, state: TranscriptState) -> _Builder:
        return cls(list(state.entries), list(state.context), dict(state.calls))

    def freeze(self) -> TranscriptState:
        return TranscriptState(tuple(self.entries), tuple(self.context), self.calls)


def _user(t: _Builder, event: EventLike) -> None:
    p = event.payload
    t.entries.append(
        {
            "seq": event.seq,
            "kind": event.kind,
            "text": p.get("text"),
            "delivery": p.get("delivery", "queue"),
            "requestId": p.get("requestId"),
        }
    )
    t.context.append({"role": "user", "seq": event.seq, "content": p.get("text")})


def _assistant(t: _Builder, event: EventLike) -> None:
    p = event.payload
    failed = is_terminal_failure(p)
    for block in tool_call_blocks(p):
        t.calls[str(block["id"])] = str(block["name"])
    t.entries.append(
        {
            "seq": event.seq,
            "kind": event.kind,
            "content": p.get("content", []),
            "stopReason": p.get("stopReason"),
            "inputSeqs": p.get("inputSeqs"),
            "failed": failed,
        }
    )
    if not failed:
        t.context.append(
            {
                "role": "assistant",
                "seq": event.seq,
                "content": p.get("content", []),
                "stopReason": p.get("stopReason"),
            }
        )


def _tool_result(t: _Builder, event: EventLike) -> None:
    p = event.payload
    call_id = str(p.get("toolCallId"))
    paired = {
        "toolCallId": call_id,
        "toolName": t.calls.get(call_id),
        "content": p.get("content", []),
        "isError": bool(p.get("isError", False)),
    }
    t.entries.append({"seq": event.seq, "kind": event.kind, **paired})
    t.context.append({"role": "toolResult", "seq": event.seq, **paired})


def _compaction(t: _Builder, event: EventLike) -> None:
    p = event.payload
    summary = p.get("summary")
    t.entries.append({"seq": event.seq, "kind": event.kind, "summary": summary})
    first_kept = p.get("firstKeptSeq")
    kept = [m for m in t.context if m["seq"] >= first_kept] if isinstance(first_kept, int) else []
    t.context = [{"role": "summary", "seq": event.seq, "content": summary}, *kept]


def _external(t: _Builder, event: EventLike) -> None:
    p = event.payload
    t.entries.append(
        {
            "seq": event.seq,
            "kind": event.kind,
            "backend": p.get("backend"),
            "externalRef": p.get("externalRef"),
            "direction": p.get("direction"),
            "payload": dict(p),
        }
    )


_APPLY: Final[Mapping[str, Callable[[_Builder, EventLike], None]]] = {
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
        return self.apply_many(state, (event,))

    def apply_many(self, state: TranscriptState, events: Sequence[EventLike]) -> TranscriptState:
        builder = _Builder.of(state)
        for event in events:
            handler = _APPLY.get(event.kind)
            if handler is not None:
                handler(builder, event)
        return builder.freeze()

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
