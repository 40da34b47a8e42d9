"""The transcript: the derived message history of a session.

Two views of one fold: `entries`, the full record in seq order (user messages, assistant messages
with their tool calls, tool results paired with their call, compactions, external events; run
summaries skipped), and the model's view, `context` followed by `waiting`.

The model's view replays what the model saw, not the commit order: an input enters `context`
right before the first completed answer whose `inputSeqs` lists it (where the request presented
it: a guide after its sibling tool results, a queued input at the next claim); until then it is
`waiting`, and the next request carries it after `context`. An answer without `inputSeqs` (a log
older than that field) is taken to have seen every input before it. Terminal failed answers
(stopReason error or aborted) are left out of the view and place nothing: the retry presents
those inputs again. A compaction replaces `context` with its summary followed by the suffix that
starts at `firstKeptSeq`; waiting inputs were never presented and stay waiting. A decision answer
(a user.message with a `decision`) is an entry but never an input: its call's tool.result is
what the model sees.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from keel_stream.kernel.decisions import released_call
from keel_stream.kernel.inputs import is_terminal_failure
from keel_stream.kernel.validation import tool_call_blocks
from keel_stream.kernel.vocabulary import Kind
from keel_stream.projections.base import EventLike

__all__ = ["TRANSCRIPT", "TranscriptProjection", "TranscriptState", "calls_of", "message_of"]

Entry = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class TranscriptState:
    entries: tuple[Entry, ...] = ()
    context: tuple[Entry, ...] = ()
    calls: Mapping[str, str] = field(default_factory=dict)
    """toolCallId -> tool name, to pair results with their call."""
    waiting: tuple[Entry, ...] = ()
    """User messages no completed answer has been given yet, in seq order."""

    @property
    def model_view(self) -> tuple[Entry, ...]:
        """The messages the next request carries: the context, then the waiting inputs."""
        return self.context + self.waiting


@dataclass(slots=True)
class _Builder:
    """A transcript being extended: mutable lists, frozen into a TranscriptState at the end."""

    entries: list[Entry]
    context: list[Entry]
    calls: dict[str, str]
    waiting: list[Entry]

    @classmethod
    def of(cls, state: TranscriptState) -> _Builder:
        return cls(list(state.entries), list(state.context), dict(state.calls), list(state.waiting))

    def freeze(self) -> TranscriptState:
        return TranscriptState(
            tuple(self.entries), tuple(self.context), self.calls, tuple(self.waiting)
        )

    def place_inputs(self, input_seqs: object) -> None:
        """Move the waiting inputs an answer was given into the context, before that answer."""
        if not isinstance(input_seqs, list):
            self.context.extend(self.waiting)
            self.waiting = []
        elif self.waiting:
            listed = set(input_seqs)
            kept: list[Entry] = []
            for m in self.waiting:
                (self.context if m["seq"] in listed else kept).append(m)
            self.waiting = kept


def _user_message(entry: Entry) -> Entry:
    return {"role": "user", "seq": entry["seq"], "content": entry["text"]}


def _assistant_message(entry: Entry) -> Entry:
    return {
        "role": "assistant",
        "seq": entry["seq"],
        "content": entry["content"],
        "stopReason": entry["stopReason"],
    }


def _tool_result_message(entry: Entry) -> Entry:
    return {
        "role": "toolResult",
        "seq": entry["seq"],
        "toolCallId": entry["toolCallId"],
        "toolName": entry["toolName"],
        "content": entry["content"],
        "isError": entry["isError"],
    }


def _summary_message(entry: Entry) -> Entry:
    return {"role": "summary", "seq": entry["seq"], "content": entry["summary"]}


_MESSAGES: Final[Mapping[str, Callable[[Entry], Entry]]] = {
    Kind.USER_MESSAGE: _user_message,
    Kind.ASSISTANT_MESSAGE: _assistant_message,
    Kind.TOOL_RESULT: _tool_result_message,
    Kind.COMPACTION: _summary_message,
}


def message_of(entry: Entry) -> Entry:
    """The context message of a transcript entry: every context message is one entry's (the
    entry with its seq, built by the same function as the fold builds it), which is what lets
    the stored context name entries instead of copying them (projections.transcript_rows)."""
    build = _MESSAGES.get(entry["kind"])
    if build is None:
        raise ValueError(f"a {entry['kind']} entry has no context message")
    return build(entry)


def calls_of(entries: Iterable[Entry]) -> dict[str, str]:
    """toolCallId -> tool name over the assistant entries, as the fold pairs them (the last
    call of an id wins)."""
    calls: dict[str, str] = {}
    for entry in entries:
        if entry["kind"] == Kind.ASSISTANT_MESSAGE:
            for block in tool_call_blocks(entry):
                calls[str(block["id"])] = str(block["name"])
    return calls


def _user(t: _Builder, event: EventLike) -> None:
    p = event.payload
    entry = {
        "seq": event.seq,
        "kind": event.kind,
        "text": p.get("text"),
        "delivery": p.get("delivery", "queue"),
        "requestId": p.get("requestId"),
    }
    if released_call(p) is not None:
        # A decision's answer or a subagent's result is not an input: the model sees what it
        # decided in the call's tool result.
        extra = {
            k: dict(p[k]) for k in ("decision", "subagentResult") if isinstance(p.get(k), dict)
        }
        t.entries.append({**entry, **extra})
        return
    t.entries.append(entry)
    t.waiting.append(_user_message(entry))


def _assistant(t: _Builder, event: EventLike) -> None:
    p = event.payload
    failed = is_terminal_failure(p)
    content = p.get("content", [])
    if isinstance(content, list):  # tool_call_blocks(p), without building the list
        for block in content:
            if isinstance(block, dict) and block.get("type") == "toolCall":
                t.calls[str(block["id"])] = str(block["name"])
    entry = {
        "seq": event.seq,
        "kind": event.kind,
        "content": content,
        "stopReason": p.get("stopReason"),
        "inputSeqs": p.get("inputSeqs"),
        "failed": failed,
    }
    t.entries.append(entry)
    if not failed:
        t.place_inputs(p.get("inputSeqs"))
        t.context.append(_assistant_message(entry))


def _tool_result(t: _Builder, event: EventLike) -> None:
    p = event.payload
    call_id = str(p.get("toolCallId"))
    entry = {
        "seq": event.seq,
        "kind": event.kind,
        "toolCallId": call_id,
        "toolName": t.calls.get(call_id),
        "content": p.get("content", []),
        "isError": bool(p.get("isError", False)),
    }
    t.entries.append(entry)
    t.context.append(_tool_result_message(entry))


def _compaction(t: _Builder, event: EventLike) -> None:
    p = event.payload
    entry = {"seq": event.seq, "kind": event.kind, "summary": p.get("summary")}
    t.entries.append(entry)
    first_kept = p.get("firstKeptSeq")
    starts = [i for i, m in enumerate(t.context) if m["seq"] == first_kept]
    kept = t.context[starts[0] :] if starts else []
    t.context = [_summary_message(entry), *kept]


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
            "waiting": list(state.waiting),
            "calls": dict(state.calls),
        }

    def load(self, data: Mapping[str, Any]) -> TranscriptState:
        return TranscriptState(
            entries=tuple(data.get("entries", ())),
            context=tuple(data.get("context", ())),
            calls=dict(data.get("calls", {})),
            waiting=tuple(data.get("waiting", ())),
        )


TRANSCRIPT: Final = TranscriptProjection()
