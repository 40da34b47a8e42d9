"""Applying events to the live read models: one PostgreSQL transaction per batch.

For every live projection the batch's sessions are locked, their states folded forward (a seq
at or below the stored one is a no-op; a gap is filled from the ledger first, and a claim check
is replaced by its event from the ledger), and the new states are written together with the
batch's source offsets. A redelivered batch therefore changes nothing, and a processor that
restarts resumes from the offsets stored with its state.

No record stalls its partition. A session whose fold raises is parked for that projection
(keel_stream.store.projection_parked): its state stays at the last seq it applied and the rest of
the batch goes on in the same transaction. A batch that PostgreSQL refuses for what it holds (a
state it cannot store), or whose states do not serialize, is applied again session by session,
one transaction per projection and session, and the sessions refused are parked the same way.
Parked sessions are left out until their entry is due for another try. An SSE frame the broker
refuses for its size is left out of keel.sse.v1 (readers heal from the ledger by seq). Anything
else (the database or the broker away, a query that fails for every batch) is raised, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from keel_stream.errors import StoreError
from keel_stream.logs import get_logger
from keel_stream.projections.base import Folded, Projection
from keel_stream.projector.events import (
    DEAD_RECORDS,
    DROPPED_FRAMES,
    PARKED,
    SourceEvent,
    SourceRecord,
    Undecodable,
    describe,
    frame_refusal,
    isolable,
)
from keel_stream.projector.storage import advance, fold_sessions, write_states
from keel_stream.relay.retry import is_retriable
from keel_stream.store.projection_parked import ParkedSession, ParkedStore
from keel_stream.store.projection_state import APPLIED, Key, ProjectionTransaction

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

FrameSink = Callable[[Sequence[SourceEvent]], Awaitable[None]]
Slot = tuple[str, int, Key]
"""(projection, generation, session key)"""


class BatchStore(Protocol):
    """What the applier asks of the store: a transaction per batch (a ProjectionStore is one)."""

    def transaction(self) -> AbstractAsyncContextManager[ProjectionTransaction]: ...

    def parked(self) -> ParkedStore: ...


@dataclass(frozen=True, slots=True)
class BatchResult:
    applied: int
    """Events newly applied, summed over projections."""
    gap_filled: int
    """Events fetched from the ledger to fill gaps, summed over projections."""
    parked: int = 0
    """Sessions parked by this batch, summed over projections."""


def live_generation(live: Mapping[str, int], projection: str) -> int:
    """The projection's live generation; StoreError if it has none (a schema not migrated)."""
    generation = live.get(projection)
    if generation is None:
        raise StoreError(f"projection {projection!r} has no live generation")
    return generation


def group_by_session(events: Iterable[SourceEvent]) -> dict[Key, list[SourceEvent]]:
    grouped: dict[Key, list[SourceEvent]] = defaultdict(list)
    for event in events:
        grouped[event.key].append(event)
    return dict(grouped)


@dataclass(slots=True)
class _Outcome:
    """What applying a batch came to, before its failures are parked."""

    applied: int = 0
    filled: int = 0
    failures: list[ParkedSession] = field(default_factory=list)
    reached: dict[Slot, int] = field(default_factory=dict)
    """The last seq each (projection, generation, session) applied up to."""

    def add(
        self, projection: str, generation: int, changed: Mapping[Key, Folded[Any]], filled: int
    ) -> None:
        self.filled += filled
        for key, folded in changed.items():
            self.reached[(projection, generation, key)] = folded.last_seq


class Applier:
    """Applies batches to every live projection; the sse projection's events go to a sink."""

    def __init__(
        self,
        store: BatchStore,
        projections: Sequence[Projection[Any]],
        topic: str,
        frame_sink: FrameSink | None = None,
        frames_of: str = "sse",
        parked: ParkedStore | None = None,
    ) -> None:
        self._store = store
        self._projections = projections
        self._topic = topic
        self._frame_sink = frame_sink
        self._frames_of = frames_of
        self.parked = parked if parked is not None else store.parked()
        self._log = get_logger("projector")
        self._sink_failure: BaseException | None = None
        """What the frame sink last raised: a failure of the sink, never one of a session."""
        self._frames_first = sorted(projections, key=lambda p: p.name != frames_of)
        """The frames' projection first, so its frames are sent while the others apply."""

    @property
    def projections(self) -> Sequence[Projection[Any]]:
        return self._projections

    async def apply(self, records: Sequence[SourceRecord | Undecodable]) -> BatchResult:
        """Apply records from the source topic and store their offsets, in one transaction;
        records that are not events are kept as dead records and passed over."""
        next_offsets: dict[int, int] = {}
        for record in records:
            next_offsets[record.partition] = max(
                next_offsets.get(record.partition, 0), record.offset + 1
            )
        events: list[SourceEvent] = []
        for record in records:
            if isinstance(record, SourceRecord):
                events.append(record.event)
                continue
            await self.parked.dead_record(
                self._topic, record.partition, record.offset, record.error, record.value
            )
            DEAD_RECORDS.inc()
            self._log.warning(
                "passed over a record that is not an event",
                partition=record.partition,
                offset=record.offset,
                error=record.error,
            )
        return await self.apply_events(events, next_offsets)

    async def apply_events(
        self, events: Sequence[SourceEvent], next_offsets: Mapping[int, int] | None = None
    ) -> BatchResult:
        """Apply events (from the topic, or the ledger) to every live projection, in one
        transaction with the source offsets they came with (see the module's docstring for
        what happens to what cannot be applied)."""
        grouped = group_by_session(events)
        parked = await self.parked.among(sorted(grouped))
        held = {p.slot for p in parked if not p.due}
        offsets = next_offsets or {}
        try:
            outcome = await self._together(grouped, offsets, held)
        except Exception as exc:
            if not self._isolable(exc):
                raise
            self._log.warning("batch refused; applying it session by session", error=repr(exc))
            outcome = await self._apart(grouped, offsets, held)
        await self._settle(parked, outcome)
        return BatchResult(outcome.applied, outcome.filled, len(outcome.failures))

    async def _together(
        self,
        grouped: Mapping[Key, Sequence[SourceEvent]],
        offsets: Mapping[int, int],
        held: set[Slot],
    ) -> _Outcome:
        outcome = _Outcome()
        async with self._store.transaction() as tx:
            live = await tx.live_generations()
            sending: asyncio.Future[None] | None = None
            try:
                for projection in self._frames_first:
                    generation = live_generation(live, projection.name)
                    skip = [k for p, g, k in held if (p, g) == (projection.name, generation)]
                    changed, applied, filled = await fold_sessions(
                        tx, projection, generation, grouped, skip=skip, failures=outcome.failures
                    )
                    outcome.add(projection.name, generation, changed, filled)
                    outcome.applied += len(applied)
                    if projection.name == self._frames_of and applied:
                        # Frames go out before the transaction commits (awaited below): if
                        # publishing fails, the state is not advanced and the batch is applied
                        # (and sent) again. They travel while the states are written.
                        sending = asyncio.ensure_future(self._frames(applied))
                    await write_states(tx, projection, generation, changed)
                    await tx.store_offsets(projection.name, generation, self._topic, offsets)
                if sending is not None:
                    await sending
            except BaseException:
                if sending is not None and not sending.done():
                    sending.cancel()
                    with contextlib.suppress(BaseException):
                        await sending
                raise
            if outcome.applied:
                await tx.notify(APPLIED)
        return outcome

    async def _apart(
        self,
        grouped: Mapping[Key, Sequence[SourceEvent]],
        offsets: Mapping[int, int],
        held: set[Slot],
    ) -> _Outcome:
        outcome = _Outcome()
        for projection in self._projections:
            for key in sorted(grouped):
                try:
                    await self._one(projection, key, grouped[key], held, outcome)
                except Exception as exc:
                    if not self._isolable(exc):
                        raise
                    outcome.failures.append(await self._refused(projection, key, exc))
        async with self._store.transaction() as tx:
            live = await tx.live_generations()
            for projection in self._projections:
                generation = live_generation(live, projection.name)
                await tx.store_offsets(projection.name, generation, self._topic, offsets)
        return outcome

    async def _one(
        self,
        projection: Projection[Any],
        key: Key,
        events: Sequence[SourceEvent],
        held: set[Slot],
        outcome: _Outcome,
    ) -> None:
        """One session of one projection, in a transaction of its own."""
        failures: list[ParkedSession] = []
        async with self._store.transaction() as tx:
            generation = live_generation(await tx.live_generations(), projection.name)
            if (projection.name, generation, key) in held:
                return
            changed, applied, filled = await fold_sessions(
                tx, projection, generation, {key: events}, failures=failures
            )
            if projection.name == self._frames_of and applied:
                await self._frames(applied)
            await write_states(tx, projection, generation, changed)
            if applied:
                await tx.notify(APPLIED)
        outcome.add(projection.name, generation, changed, filled)
        outcome.applied += len(applied)
        outcome.failures.extend(failures)

    async def _refused(
        self, projection: Projection[Any], key: Key, exc: BaseException
    ) -> ParkedSession:
        """The parked entry of a session whose state was refused: from its first seq not
        applied."""
        async with self._store.transaction() as tx:
            generation = live_generation(await tx.live_generations(), projection.name)
            stored = (await tx.lock_states(projection.name, generation, [key])).get(key)
        seq = (stored.last_seq if stored is not None else 0) + 1
        return ParkedSession(*key, projection.name, generation, seq, describe(exc))

    async def _frames(self, events: Sequence[SourceEvent]) -> None:
        """Send the events' SSE frames; a frame the broker refuses for what it is (its size) is
        left out, the others go."""
        if self._frame_sink is None:
            return
        try:
            await self._frame_sink(events)
            return
        except Exception as exc:
            if is_retriable(exc) or frame_refusal(exc) is None:
                self._sink_failure = exc
                raise
        for event in events:
            try:
                await self._frame_sink([event])
            except Exception as exc:
                if is_retriable(exc) or frame_refusal(exc) is None:
                    self._sink_failure = exc
                    raise
                DROPPED_FRAMES.inc()
                self._log.warning(
                    "an SSE frame was refused; readers read that event from the ledger",
                    tenant=event.tenant,
                    session=event.session,
                    seq=event.seq,
                    error=repr(exc),
                )

    def _isolable(self, exc: BaseException) -> bool:
        return exc is not self._sink_failure and isolable(exc)

    async def _settle(self, parked: Sequence[ParkedSession], outcome: _Outcome) -> None:
        """Park the sessions that failed; release those parked before that applied now."""
        failed = {f.slot: f for f in outcome.failures}  # one entry per slot
        await self.parked.park(list(failed.values()))
        for failure in failed.values():
            PARKED.labels(failure.projection).inc()
            self._log.error(
                "parked a session that cannot be applied",
                projection=failure.projection,
                tenant=failure.tenant,
                session=failure.session,
                seq=failure.seq,
                error=failure.error,
            )
        recovered = [
            p
            for p in parked
            if p.due and p.slot not in failed and outcome.reached.get(p.slot, 0) >= p.seq
        ]
        await self.parked.release(recovered)
        for p in recovered:
            self._log.info(
                "a parked session applied", projection=p.projection, tenant=p.tenant, seq=p.seq
            )
