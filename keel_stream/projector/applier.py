"""Applying events to the live read models: one PostgreSQL transaction per batch.

For every live projection the batch's sessions are locked, their states folded forward (a seq
at or below the stored one is a no-op; a gap is filled from the ledger first), and the new
states are written together with the batch's source offsets. A redelivered batch therefore
changes nothing, and a processor that restarts resumes from the offsets stored with its state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from keel_stream.errors import StoreError
from keel_stream.kernel.types import Event
from keel_stream.projections.base import Folded, Projection, fresh
from keel_stream.projector.events import SourceRecord
from keel_stream.store.projection_state import (
    APPLIED,
    Key,
    LedgerReader,
    ProjectionTransaction,
    StoredState,
)

__all__ = [
    "Applier",
    "BatchResult",
    "BatchStore",
    "FrameSink",
    "advance",
    "fold_sessions",
    "live_generation",
    "write_states",
]

FrameSink = Callable[[Sequence[Event]], Awaitable[None]]


class BatchStore(Protocol):
    """What the applier asks of the store: a transaction per batch (a ProjectionStore is one)."""

    def transaction(self) -> AbstractAsyncContextManager[ProjectionTransaction]: ...


@dataclass(frozen=True, slots=True)
class BatchResult:
    applied: int
    """Events newly applied, summed over projections."""
    gap_filled: int
    """Events fetched from the ledger to fill gaps, summed over projections."""


def live_generation(live: Mapping[str, int], projection: str) -> int:
    """The projection's live generation; StoreError if it has none (a schema not migrated)."""
    generation = live.get(projection)
    if generation is None:
        raise StoreError(f"projection {projection!r} has no live generation")
    return generation


async def fold_sessions(
    tx: ProjectionTransaction,
    projection: Projection[Any],
    generation: int,
    events: Mapping[Key, Sequence[Event]],
) -> tuple[dict[Key, Folded[Any]], list[Event], int]:
    """Fold each session's events onto its locked stored state.

    Returns the changed states, the events applied (in order, per session) and how many were
    fetched from the ledger to fill gaps.
    """
    keys = sorted(events)
    locked = await tx.lock_states(projection.name, generation, keys)
    changed: dict[Key, Folded[Any]] = {}
    applied: list[Event] = []
    filled = 0
    for key in keys:
        stored = locked.get(key)
        folded = (
            Folded(stored.last_seq, projection.load(stored.state))
            if stored is not None
            else Folded(0, projection.initial())
        )
        advanced, run, from_ledger = await advance(tx, projection, folded, key, events[key])
        if run:
            changed[key] = advanced
            applied.extend(run)
            filled += from_ledger
    return changed, applied, filled


async def advance(
    ledger: LedgerReader,
    projection: Projection[Any],
    folded: Folded[Any],
    key: Key,
    events: Sequence[Event],
) -> tuple[Folded[Any], list[Event], int]:
    """Fold a session's new events onto its state, filling gaps from the ledger first.

    Returns the new state, the events it applied in seq order, and how many came from the ledger.
    """
    run: list[Event] = []
    filled = 0
    expected = folded.last_seq + 1
    for event in sorted(events, key=lambda e: e.seq):
        if event.seq < expected:
            continue  # already applied, or a duplicate within the batch
        if event.seq > expected:
            missing = await ledger.ledger_range(key[0], key[1], expected - 1, event.seq - 1)
            run.extend(missing)
            filled += len(missing)
        run.append(event)
        expected = event.seq + 1
    if not run:
        return folded, [], 0
    run = fresh(run, folded.last_seq)
    return Folded(run[-1].seq, projection.apply_many(folded.state, run)), run, filled


async def write_states(
    tx: ProjectionTransaction,
    projection: Projection[Any],
    generation: int,
    changed: Mapping[Key, Folded[Any]],
) -> None:
    states = {k: StoredState(f.last_seq, projection.dump(f.state)) for k, f in changed.items()}
    await tx.write_states(projection.name, generation, states)


def group_by_session(events: Iterable[Event]) -> dict[Key, list[Event]]:
    grouped: dict[Key, list[Event]] = defaultdict(list)
    for event in events:
        grouped[event.key].append(event)
    return dict(grouped)


class Applier:
    """Applies batches to every live projection; the sse projection's events go to a sink."""

    def __init__(
        self,
        store: BatchStore,
        projections: Sequence[Projection[Any]],
        topic: str,
        frame_sink: FrameSink | None = None,
        frames_of: str = "sse",
    ) -> None:
        self._store = store
        self._projections = projections
        self._topic = topic
        self._frame_sink = frame_sink
        self._frames_of = frames_of

    async def apply(self, records: Sequence[SourceRecord]) -> BatchResult:
        """Apply records from the source topic and store their offsets, in one transaction."""
        next_offsets: dict[int, int] = {}
        for record in records:
            next_offsets[record.partition] = max(
                next_offsets.get(record.partition, 0), record.offset + 1
            )
        return await self.apply_events([r.event for r in records], next_offsets)

    async def apply_events(
        self, events: Sequence[Event], next_offsets: Mapping[int, int] | None = None
    ) -> BatchResult:
        """Apply events (from the topic, or the ledger) to every live projection, in one
        transaction with the source offsets they came with."""
        grouped = group_by_session(events)
        applied_total = filled_total = 0
        async with self._store.transaction() as tx:
            live = await tx.live_generations()
            for projection in self._projections:
                generation = live_generation(live, projection.name)
                changed, applied, filled = await fold_sessions(tx, projection, generation, grouped)
                applied_total += len(applied)
                filled_total += filled
                if projection.name == self._frames_of and applied and self._frame_sink:
                    # Frames go out before the transaction commits: if publishing fails, the
                    # state is not advanced and the batch is applied (and sent) again.
                    await self._frame_sink(applied)
                await write_states(tx, projection, generation, changed)
                await tx.store_offsets(projection.name, generation, self._topic, next_offsets or {})
            if applied_total:
                await tx.notify(APPLIED)
        return BatchResult(applied=applied_total, gap_filled=filled_total)
