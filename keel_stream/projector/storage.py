"""Folding sessions onto their stored states and writing them back, in a batch's transaction.

A state is stored as a document (`projection.dump`), except the transcript's on a store that
keeps it as rows (keel_stream.store.projection_rows): there a session's state is a `Pending`
(projections.transcript_rows), the partial state the document fold runs on, and only what the
batch changed is written. Which form a projection takes is decided here, once per batch: the
transcript (its state a TranscriptState, the fold the projection's own, so a wrapped or replaced
transcript fold is stored the same way) on a TranscriptRowsTransaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from keel_stream.projections.base import Folded, Projection
from keel_stream.projections.transcript import TranscriptState
from keel_stream.projections.transcript_rows import (
    Pending,
    is_document,
    needed_calls,
    needs_context,
    pending_of,
    prepared,
    to_rows,
)
from keel_stream.projector.events import SourceEvent, fold_isolated, gather
from keel_stream.store.projection_parked import ParkedSession
from keel_stream.store.projection_rows import (
    TRANSCRIPT,
    TranscriptRowsTransaction,
    TranscriptWrite,
)
from keel_stream.store.projection_state import (
    Key,
    LedgerReader,
    ProjectionTransaction,
    StoredState,
)

__all__ = ["advance", "fold_sessions", "stores_rows", "write_states"]

_Runs = dict[Key, tuple[StoredState | None, list[SourceEvent]]]


def stores_rows(projection: Projection[Any], tx: object) -> bool:
    """Whether this projection's states are rows in this transaction's store."""
    return (
        projection.name == TRANSCRIPT
        and isinstance(tx, TranscriptRowsTransaction)
        and isinstance(projection.initial(), TranscriptState)
    )


async def _pending(tx: TranscriptRowsTransaction, generation: int, runs: _Runs) -> dict[Key, Any]:
    """Each session's Pending: its head, and what its events need read (calls, context)."""
    stored_rows = {k for k, (s, _) in runs.items() if s is not None and not is_document(s.state)}
    wanted = {k: needed_calls(runs[k][1]) for k in stored_rows}
    calls = await tx.transcript_calls(generation, {k: c for k, c in wanted.items() if c})
    compacting = [k for k in sorted(stored_rows) if needs_context(runs[k][1])]
    contexts = await tx.transcript_context(generation, compacting)
    return {
        k: pending_of(
            None if stored is None else stored.state,
            calls=calls.get(k),
            context=contexts.get(k),
        )
        for k, (stored, _) in runs.items()
    }


def _fold(
    projection: Projection[Any], start: Folded[Any], run: list[SourceEvent], isolated: bool
) -> tuple[Folded[Any], list[SourceEvent], tuple[int, str] | None]:
    """Fold run onto start (a document state, or a Pending); with isolated, up to the event
    that raises, and that event's seq and error."""
    pending = prepared(start.state, run) if isinstance(start.state, Pending) else None
    inner = start if pending is None else Folded(start.last_seq, pending.state)
    if isolated:
        folded, run, failure = fold_isolated(projection, inner, run)
    else:
        folded = Folded(run[-1].seq, projection.apply_many(inner.state, run))
        failure = None
    if pending is not None:
        folded = Folded(folded.last_seq, replace(pending, state=folded.state))
    return folded, run, failure


async def fold_sessions(
    tx: ProjectionTransaction,
    projection: Projection[Any],
    generation: int,
    events: Mapping[Key, Sequence[SourceEvent]],
    *,
    skip: Iterable[Key] = (),
    failures: list[ParkedSession] | None = None,
) -> tuple[dict[Key, Folded[Any]], list[SourceEvent], int]:
    """Fold each session's events (but those in skip) onto its locked stored state.

    Returns the changed states, the events applied (in order, per session) and how many were
    fetched from the ledger. With `failures`, a session whose fold raises is appended there
    (its state advanced up to the event before) instead of raising.
    """
    left_out = set(skip)
    keys = sorted(k for k in events if k not in left_out)
    locked = await tx.lock_states(projection.name, generation, keys)
    runs: _Runs = {}
    filled = 0
    for key in keys:
        stored = locked.get(key)
        run, from_ledger = await gather(
            tx, stored.last_seq if stored is not None else 0, key, events[key]
        )
        if run:
            runs[key] = (stored, run)
            filled += from_ledger
    if isinstance(tx, TranscriptRowsTransaction) and stores_rows(projection, tx):
        starts = await _pending(tx, generation, runs)
    else:
        starts = {
            k: projection.initial() if s is None else projection.load(s.state)
            for k, (s, _) in runs.items()
        }
    changed: dict[Key, Folded[Any]] = {}
    applied: list[SourceEvent] = []
    for key, (stored, run) in runs.items():
        start = Folded(stored.last_seq if stored is not None else 0, starts[key])
        advanced, run, failure = _fold(projection, start, run, failures is not None)
        if failure is not None and failures is not None:
            failures.append(ParkedSession(*key, projection.name, generation, *failure))
        if run:
            changed[key] = advanced
            applied.extend(run)
    return changed, applied, filled


async def advance(
    ledger: LedgerReader,
    projection: Projection[Any],
    folded: Folded[Any],
    key: Key,
    events: Sequence[SourceEvent],
) -> tuple[Folded[Any], list[SourceEvent], int]:
    """Fold a session's new events onto its state (a document state, or a Pending), filling
    gaps (and claim checks) from the ledger first. Returns the new state, the events it applied
    in seq order, and how many came from the ledger."""
    run, filled = await gather(ledger, folded.last_seq, key, events)
    if not run:
        return folded, [], 0
    advanced, run, _ = _fold(projection, folded, run, isolated=False)
    return advanced, run, filled


async def write_states(
    tx: ProjectionTransaction,
    projection: Projection[Any],
    generation: int,
    changed: Mapping[Key, Folded[Any]],
) -> None:
    """Write the changed states: documents, or (Pending states) the heads and rows."""
    documents: dict[Key, StoredState] = {}
    transcripts: list[TranscriptWrite] = []
    for key, folded in changed.items():
        if isinstance(folded.state, Pending):
            rows, _ = to_rows(folded.state, projection.dump(folded.state.state))
            transcripts.append(TranscriptWrite(key, folded.last_seq, rows))
        else:
            documents[key] = StoredState(folded.last_seq, projection.dump(folded.state))
    await tx.write_states(projection.name, generation, documents)
    if transcripts:
        if not isinstance(tx, TranscriptRowsTransaction):
            raise TypeError("transcript rows need a TranscriptRowsTransaction")
        await tx.write_transcripts(projection.name, generation, transcripts)
