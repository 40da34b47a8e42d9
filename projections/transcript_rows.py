"""The transcript in the shape PostgreSQL stores it: one row per entry, and a small head.

Every context message is the message of one entry, the entry with its seq (`message_of`), so the
context is stored as each entry's `position` in it (NULL: not in it) rather than as copies of the
entries. The head holds the rest: the waiting inputs and `contextEnd`, the next free position.
`calls` is not stored at all: it is read off the assistant entries (`calls_of`).

A batch is folded by the document fold itself (TranscriptProjection.apply_many, so nothing about
the transcript's meaning lives here) over a *partial* state: no entries (the new ones are all it
adds), no context (the new messages are all it appends) and the waiting inputs from the head.
Only a compaction reads the context it replaces: then the context goes in as stubs, one
`{"seq", "position"}` per message in it. `to_rows` turns what came out into what changed: the new
entry rows with their positions, and the stored entries whose position moved (a waiting input
that entered the context, a message a compaction dropped). `assemble` is the read: the document
the fold would have produced, from the head and the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from keel_stream.kernel.vocabulary import Kind
from keel_stream.projections.base import EventLike
from keel_stream.projections.transcript import Entry, TranscriptState, calls_of, message_of

__all__ = [
    "DOCUMENT_KEYS",
    "Pending",
    "TranscriptRows",
    "assemble",
    "head_of",
    "in_memory",
    "is_document",
    "needed_calls",
    "needs_context",
    "pending_of",
    "prepared",
    "to_rows",
]

DOCUMENT_KEYS: Final = ("entries", "context", "calls")
"""What the document has that the head does not (the rows and what they give)."""
_END: Final = "contextEnd"
_POSITION: Final = "position"


@dataclass(frozen=True, slots=True)
class TranscriptRows:
    """What folding a batch changed, as rows."""

    entries: list[tuple[int, int | None, Entry]]
    """The new entries: (seq, position in the context or None, the entry)."""
    moved: dict[int, int | None]
    """Stored entries whose position changed: seq -> position (None: left the context)."""
    head: dict[str, Any]
    """The head document: the fold's dump without its rows, and contextEnd."""


@dataclass(slots=True)
class Pending:
    """A session's transcript between two writes: the partial state folded so far, the context
    end it started from and the stubs of the stored context it was given."""

    state: TranscriptState
    end: int
    stubs: tuple[Entry, ...] = ()
    document: bool = False
    """The stored state was a whole document: every entry of it is still to be written."""
    known: dict[int, int] | None = None
    """Kept in memory (a rebuild): the position of every stored entry in the context. Owned:
    `to_rows` updates it in place and hands it to the next Pending."""
    calls: dict[str, str] | None = None
    """Kept in memory with `known`: every call made so far (updated in place the same way)."""


def in_memory() -> Pending:
    """A new session's Pending that keeps its stored context and calls in memory (a rebuild
    folds from seq 1 and reads nothing back), so it never needs them read."""
    return Pending(TranscriptState(), 0, known={}, calls={})


def prepared(pending: Pending, events: Sequence[EventLike]) -> Pending:
    """The Pending to fold these events onto: for one kept in memory, given the stored calls
    their results pair with and, for a compaction, the stored context as stubs (which a
    Pending read from the store was given already)."""
    if pending.known is None or pending.calls is None:
        return pending
    kinds = {e.kind for e in events}
    if Kind.TOOL_RESULT not in kinds and Kind.COMPACTION not in kinds:
        return pending
    state = pending.state
    needed = needed_calls(events) - state.calls.keys()
    found = {c: pending.calls[c] for c in needed if c in pending.calls}
    context, stubs = state.context, pending.stubs
    if Kind.COMPACTION in kinds and not stubs and pending.known:
        order = sorted(pending.known.items(), key=lambda item: item[1])
        stubs = tuple({"seq": seq, _POSITION: pos} for seq, pos in order)
        context = stubs + context  # what was appended since the last write comes after
    state = replace(state, calls={**state.calls, **found}, context=context)
    return replace(pending, state=state, stubs=stubs)


def is_document(stored: Mapping[str, Any]) -> bool:
    """A transcript stored as one document (before migration 0032, or by a projection that
    writes documents), not as a head."""
    return "entries" in stored


def head_of(stored: Mapping[str, Any]) -> tuple[list[Entry], int]:
    """The waiting inputs and the context end of a stored head."""
    return list(stored.get("waiting", ())), int(stored.get(_END, 0))


def pending_of(
    stored: Mapping[str, Any] | None,
    *,
    calls: Mapping[str, str] | None = None,
    context: Sequence[tuple[int, int]] | None = None,
) -> Pending:
    """The partial state to fold a session's next events onto, from its stored head (None: a new
    session), the calls its tool results pair with, and (for a compaction) its stored context
    as (seq, position) in position order."""
    if stored is None:
        return Pending(TranscriptState(), 0)
    if is_document(stored):
        whole = TranscriptState(
            entries=tuple(stored.get("entries", ())),
            context=tuple(stored.get("context", ())),
            calls=dict(stored.get("calls", {})),
            waiting=tuple(stored.get("waiting", ())),
        )
        return Pending(whole, 0, document=True)
    waiting, end = head_of(stored)
    stubs = tuple({"seq": seq, _POSITION: pos} for seq, pos in context or ())
    state = TranscriptState((), stubs, dict(calls or {}), tuple(waiting))
    return Pending(state, end, stubs)


def needs_context(events: Iterable[EventLike]) -> bool:
    """Whether folding these events reads the context: only a compaction does."""
    return any(e.kind == Kind.COMPACTION for e in events)


def needed_calls(events: Sequence[EventLike]) -> set[str]:
    """The tool calls these events' results pair with that they do not make themselves."""
    if not any(e.kind == Kind.TOOL_RESULT for e in events):
        return set()
    made: set[str] = set()
    needed: set[str] = set()
    for event in events:
        if event.kind == Kind.ASSISTANT_MESSAGE:
            content = event.payload.get("content")
            if isinstance(content, list):
                made.update(
                    str(b.get("id"))
                    for b in content
                    if isinstance(b, dict) and b.get("type") == "toolCall"
                )
        elif event.kind == Kind.TOOL_RESULT:
            call_id = str(event.payload.get("toolCallId"))
            if call_id not in made:
                needed.add(call_id)
    return needed


def _positions(context: Sequence[Entry], end: int) -> tuple[list[int], int]:
    """Positions for the messages of a folded context: a stub keeps its own; messages after
    the stubs take the next ones from `end`; messages before them (a compaction's summaries)
    take the ones just below the first stub, which the compaction freed. Returns them and the
    new end."""
    stubbed = [i for i, m in enumerate(context) if _POSITION in m]
    if not stubbed:
        return list(range(end, end + len(context))), end + len(context)
    first, last = stubbed[0], stubbed[-1]
    if last - first + 1 != len(stubbed):
        raise ValueError("new context messages between stored ones")
    base = int(context[first][_POSITION])
    positions = [base - (first - i) for i in range(first)]
    positions += [int(m[_POSITION]) for m in context[first : last + 1]]
    after = len(context) - last - 1
    positions += list(range(end, end + after))
    return positions, end + after


def to_rows(pending: Pending, dumped: Mapping[str, Any]) -> tuple[TranscriptRows, Pending]:
    """The rows a fold changed (`dumped`: the projection's dump of the folded partial state),
    and the Pending to fold further onto once they are written (for one kept in memory; one
    read from the store is read again)."""
    context = list(dumped["context"])
    positions, end = _positions(context, pending.end)
    placed = {m["seq"]: p for m, p in zip(context, positions, strict=True)}
    entries = list(dumped["entries"])
    rows = [(e["seq"], placed.get(e["seq"]), e) for e in entries]
    moved: dict[int, int | None] = {}
    if not pending.document:  # else every entry is a new row
        fresh = {e["seq"] for e in entries}
        for m, p in zip(context, positions, strict=True):
            if _POSITION not in m and m["seq"] not in fresh:
                moved[m["seq"]] = p  # a stored waiting input that entered the context
        moved.update({s["seq"]: None for s in pending.stubs if s["seq"] not in placed})
    head = {k: v for k, v in dumped.items() if k not in DOCUMENT_KEYS}
    head[_END] = end
    state = TranscriptState(waiting=tuple(dumped["waiting"]))
    known, calls = pending.known, pending.calls
    if known is not None and calls is not None:
        calls.update(dumped["calls"])
        known.update((seq, at) for seq, at, _ in rows if at is not None)
        for seq, to in moved.items():
            if to is None:
                known.pop(seq, None)
            else:
                known[seq] = to
    return TranscriptRows(rows, moved, head), Pending(state, end, known=known, calls=calls)


def assemble(head: Mapping[str, Any], rows: Iterable[tuple[int | None, Entry]]) -> dict[str, Any]:
    """The transcript document from its head and its entry rows (in seq order, each with its
    position), as the fold dumps it. A stored document is returned as it is."""
    if is_document(head):
        return dict(head)
    entries: list[Entry] = []
    placed: list[tuple[int, int]] = []
    for position, entry in rows:
        if position is not None:
            placed.append((position, len(entries)))
        entries.append(entry)
    placed.sort()
    return {
        "entries": entries,
        "context": [message_of(entries[i]) for _, i in placed],
        "waiting": list(head.get("waiting", ())),
        "calls": calls_of(entries),
    }
