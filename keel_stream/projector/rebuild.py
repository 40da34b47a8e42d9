"""Rebuilding a projection from offset zero into a new generation, then switching readers to it.

The rebuild does not go through Faust: it reads the source topic in large batches with a plain
consumer (partitions assigned, no group), decodes records without pydantic, folds in memory, and
every `flush_every` events writes what changed (a state per touched session; a transcript's new
entries with COPY) with the offsets reached, in the background while the next batches fold.
"Caught up" is judged by the high-water marks that come back with fetched data, never by
ListOffsets alone. Then it heals from the ledger what the
topic lacked, and switches: under the projection's generation lock, every session the old
generation had further along is brought level from the ledger, and the new generation goes live
in the same transaction. Readers see the old generation until that commit and the new one after,
never a partial model.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final

from keel_stream.errors import UnknownProjection
from keel_stream.kafka import clients
from keel_stream.kafka.partitions import topic_partitions
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.projections import ALL
from keel_stream.projections.base import Folded, Projection
from keel_stream.projections.transcript_rows import TranscriptRows, in_memory, to_rows
from keel_stream.projector.events import DecodedEvent
from keel_stream.projector.storage import advance, fold_sessions, stores_rows, write_states
from keel_stream.store.projection_rows import (
    EntryRow,
    TranscriptRowsTransaction,
    TranscriptWrite,
)
from keel_stream.store.projection_state import (
    SWITCHED,
    Key,
    ProjectionStore,
    ProjectionTransaction,
    StoredState,
)
from keel_stream.topics.catalog import EVENTS

__all__ = ["Progress", "RebuildReport", "rebuild"]

_YIELD_EVERY: Final = 2000
"""Events folded between two yields to the event loop: a flush writing in the background
sends its rows to PostgreSQL only when the loop runs, and PostgreSQL would otherwise wait for
the fold of a whole batch."""
_COLLECT_EVERY: Final = 1_000_000
"""Events replayed between two collections of the young generation (the collector is off)."""


@dataclass(frozen=True, slots=True)
class Progress:
    events: int
    lag: int | None
    """Records left to read (None until every partition's high-water mark is known)."""
    events_per_s: float


@dataclass(frozen=True, slots=True)
class RebuildReport:
    projection: str
    generation: int
    events: int
    sessions: int
    healed_from_ledger: int
    seconds: float


class _Reader:
    """A group-less consumer over every partition of the source, from offset zero."""

    def __init__(self, kafka: KafkaSettings, topic: str) -> None:
        self._consumer = clients.consumer(
            kafka,
            "rebuild",
            enable_auto_commit=False,
            # assign() starts a reset of its own; "latest" could win over the seek to the start
            # on some brokers and skip the topic (the rebuild would then heal from the ledger).
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=8 * 1024 * 1024,
        )
        self._kafka = kafka
        self._topic = topic
        self.partitions: list[clients.TopicPartition] = []

    async def start(self) -> None:
        _, self.partitions = await asyncio.gather(
            self._consumer.start(), topic_partitions(self._kafka, [self._topic])
        )
        self._consumer.assign(self.partitions)
        await self._consumer.seek_to_beginning(*self.partitions)

    async def stop(self) -> None:
        await self._consumer.stop()

    async def batch(self) -> tuple[list[bytes], dict[int, int]]:
        """The values of the next records, and the next offset of each partition they are of."""
        fetched = await self._consumer.getmany(timeout_ms=200, max_records=20_000)
        values = [r.value for records in fetched.values() for r in records if r.value is not None]
        return values, {tp.partition: rs[-1].offset + 1 for tp, rs in fetched.items() if rs}

    async def lag(self) -> int | None:
        """Records between each partition's position and its high-water mark."""
        total = 0
        for tp in self.partitions:
            high = self._consumer.highwater(tp)
            if high is None:
                return None
            total += max(0, high - await self._consumer.position(tp))
        return total


async def _level(
    tx: ProjectionTransaction,
    projection: Projection[Any],
    old: int | None,
    new: int,
    *,
    to_ledger: bool,
) -> int:
    """Bring the new generation level with the old one (or the ledger head) from the ledger."""
    events = {
        (b.tenant, b.session): await tx.ledger_range(b.tenant, b.session, b.applied, b.target)
        for b in await tx.behind_generation(projection.name, old, new, to_ledger=to_ledger)
    }
    if not events:
        return 0
    changed, applied, _ = await fold_sessions(tx, projection, new, events)
    await write_states(tx, projection, new, changed)
    return len(applied)


async def _switch(store: ProjectionStore, projection: Projection[Any], generation: int) -> int:
    """Heal the new generation from the ledger and make it live; how many events that took.

    The switch runs under the projection's generation lock: every session the old generation
    has further along is brought level in the same transaction that makes the new one live."""
    async with store.transaction() as tx:
        healed = await _level(tx, projection, None, generation, to_ledger=True)
    async with store.transaction() as tx:
        generations = await tx.lock_generations(projection.name)
        old = next((g for g, status in generations.items() if status == "live"), None)
        healed += await _level(tx, projection, old, generation, to_ledger=False)
        await tx.switch(projection.name, generation)
        await tx.notify(SWITCHED)
    return healed


@dataclass(slots=True)
class _Flush:
    """What one flush writes, taken from the replay at once (the replay goes on meanwhile)."""

    documents: dict[Key, StoredState] = field(default_factory=dict)
    transcripts: list[TranscriptWrite] = field(default_factory=list)
    entries: list[EntryRow] = field(default_factory=list)
    next_offsets: dict[int, int] = field(default_factory=dict)


class _Replay:
    """The fold of the source topic in memory, flushed now and then into the new generation.

    A flush takes what changed since the last one and writes it in a transaction of its own,
    in the background: the next batches are decoded and folded while PostgreSQL writes (one
    flush at a time). Transcripts are folded as Pending states (projections.transcript_rows):
    a flush COPYs their new entries and keeps only the context and calls in memory."""

    def __init__(
        self,
        store: ProjectionStore,
        projection: Projection[Any],
        generation: int,
        topic: str,
        *,
        rows: bool,
    ) -> None:
        self.store = store
        self.projection = projection
        self.generation = generation
        self.topic = topic
        self.rows = rows
        self.states: dict[Key, Folded[Any]] = {}
        self.dirty: set[Key] = set()
        self.next_offsets: dict[int, int] = {}
        self.events = 0
        self.healed = 0
        self._start = Folded(0, in_memory() if rows else projection.initial())
        self._writing: asyncio.Task[None] | None = None
        self._collected = 0

    async def add(self, values: list[bytes], next_offsets: dict[int, int]) -> None:
        by_session: dict[Key, list[DecodedEvent]] = {}
        for value in values:
            event = DecodedEvent.of(value)
            by_session.setdefault((event.tenant, event.session), []).append(event)
        self.next_offsets.update(next_offsets)
        since_yield = 0
        for key, session_events in by_session.items():
            folded = self.states.get(key, self._start)
            folded, run, filled = await advance(
                self.store, self.projection, folded, key, session_events
            )
            self.healed += filled
            if run:
                self.states[key] = folded
                self.dirty.add(key)
            since_yield += len(session_events)
            if since_yield >= _YIELD_EVERY:
                await asyncio.sleep(0)  # lets the flush in the background send its next rows
                since_yield = 0
        self.events += len(values)

    def _take(self) -> _Flush:
        taken = _Flush(next_offsets=dict(self.next_offsets))
        for key in sorted(self.dirty):
            folded = self.states[key]
            if not self.rows:
                taken.documents[key] = StoredState(
                    folded.last_seq, self.projection.dump(folded.state)
                )
                continue
            rows, after = to_rows(folded.state, self.projection.dump(folded.state.state))
            self.states[key] = Folded(folded.last_seq, after)
            taken.entries.extend((self.generation, *key, *row) for row in rows.entries)
            head = TranscriptRows([], rows.moved, rows.head)
            taken.transcripts.append(TranscriptWrite(key, folded.last_seq, head))
        self.dirty.clear()
        return taken

    async def _write(self, taken: _Flush) -> None:
        name = self.projection.name
        async with self.store.transaction() as tx:
            if taken.entries or taken.transcripts:
                if not isinstance(tx, TranscriptRowsTransaction):
                    raise TypeError("transcript rows need a TranscriptRowsTransaction")
                await tx.copy_transcript_entries(taken.entries)
                await tx.write_transcripts(name, self.generation, taken.transcripts)
            await tx.write_states(name, self.generation, taken.documents)
            await tx.store_offsets(name, self.generation, self.topic, taken.next_offsets)

    async def flush(self, *, wait: bool = False) -> None:
        """Write what changed since the last flush (after the flush before it is written)."""
        await self.written()
        if self.dirty:
            self._writing = asyncio.create_task(self._write(self._take()))
        if self.events >= self._collected + _COLLECT_EVERY:
            gc.collect(0)
            self._collected = self.events
        if wait:
            await self.written()

    async def written(self) -> None:
        writing, self._writing = self._writing, None
        if writing is not None:
            await writing

    async def abandon(self) -> None:
        """Stop a flush still being written (the rebuild failed: its generation stays building)."""
        writing, self._writing = self._writing, None
        if writing is not None and not writing.done():
            writing.cancel()
            with contextlib.suppress(BaseException):
                await writing


@contextlib.contextmanager
def _collecting_at_flushes() -> Iterator[None]:
    """The cyclic collector off while the topic is replayed (it is back on afterwards).

    A replay keeps every event of a batch and every state it folds alive: the collector's
    automatic passes, set off by that many allocations, took about half of a rebuild's CPU,
    walking those survivors again and again. The loop makes almost no cycles; what it allocates
    is collected once every _COLLECT_EVERY events instead (see _Replay.flush)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


async def _replay(
    reader: _Reader,
    replay: _Replay,
    started: float,
    flush_every: int,
    on_progress: Callable[[Progress], None],
) -> None:
    """Read and fold until caught up with the high-water marks, flushing on the way."""
    unflushed = 0
    while True:
        values, next_offsets = await reader.batch()
        await replay.add(values, next_offsets)
        unflushed += len(values)
        lag = await reader.lag()
        elapsed = max(time.monotonic() - started, 1e-6)
        on_progress(Progress(replay.events, lag, replay.events / elapsed))
        if unflushed >= flush_every or lag == 0:
            await replay.flush()
            unflushed = 0
        if lag == 0:
            break
    await replay.flush(wait=True)


async def _stores_rows(store: ProjectionStore, projection: Projection[Any]) -> bool:
    async with store.transaction() as tx:
        return stores_rows(projection, tx)


async def rebuild(
    store: ProjectionStore,
    kafka: KafkaSettings,
    name: str,
    *,
    topic_prefix: str = "",
    flush_every: int = 20_000,
    on_progress: Callable[[Progress], None] = lambda progress: None,
) -> RebuildReport:
    """Replay the source topic from offset zero into a new generation and make it live."""
    projection = next((p for p in ALL if p.name == name), None)
    if projection is None:
        raise UnknownProjection(f"no read model named {name!r}")
    topic = EVENTS.full_name(topic_prefix)
    started = time.monotonic()
    reader = _Reader(kafka, topic)
    try:
        generation, rows, _ = await asyncio.gather(
            store.new_generation(name), _stores_rows(store, projection), reader.start()
        )
    except BaseException:
        await reader.stop()
        raise
    replay = _Replay(store, projection, generation, topic, rows=rows)
    try:
        with _collecting_at_flushes():
            await _replay(reader, replay, started, flush_every, on_progress)
        healed = replay.healed + await _switch(store, projection, replay.generation)
    finally:
        await replay.abandon()
        await reader.stop()
    return RebuildReport(
        projection=name,
        generation=replay.generation,
        events=replay.events,
        sessions=len(replay.states),
        healed_from_ledger=healed,
        seconds=time.monotonic() - started,
    )
