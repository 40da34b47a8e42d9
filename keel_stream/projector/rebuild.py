"""Rebuilding a projection from offset zero into a new generation, then switching readers to it.

The rebuild does not go through Faust: it reads the source topic in large batches with a plain
consumer (partitions assigned, no group), folds in memory, and writes one row per touched
session per flush, with the offsets reached. "Caught up" is judged by the high-water marks that
come back with fetched data, never by ListOffsets alone. Then it heals from the ledger what the
topic lacked, and switches: under the projection's generation lock, every session the old
generation had further along is brought level from the ledger, and the new generation goes live
in the same transaction. Readers see the old generation until that commit and the new one after,
never a partial model.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from keel_stream.errors import UnknownProjection
from keel_stream.kafka.partitions import topic_partitions
from keel_stream.kernel.types import Event
from keel_stream.projections import ALL
from keel_stream.projections.base import Folded, Projection
from keel_stream.projector.applier import advance, fold_sessions, write_states
from keel_stream.store.projection_state import (
    SWITCHED,
    Key,
    ProjectionStore,
    ProjectionTransaction,
)
from keel_stream.topics.catalog import EVENTS

__all__ = ["Progress", "RebuildReport", "rebuild"]


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

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            # assign() starts a reset of its own; "latest" could win over the seek to the start
            # on some brokers and skip the topic (the rebuild would then heal from the ledger).
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=8 * 1024 * 1024,
        )
        self._bootstrap = bootstrap
        self._topic = topic
        self.partitions: list[TopicPartition] = []

    async def start(self) -> None:
        await self._consumer.start()
        self.partitions = await topic_partitions(self._bootstrap, [self._topic])
        self._consumer.assign(self.partitions)
        await self._consumer.seek_to_beginning(*self.partitions)

    async def stop(self) -> None:
        await self._consumer.stop()

    async def batch(self) -> list[tuple[int, int, bytes]]:
        fetched = await self._consumer.getmany(timeout_ms=200, max_records=20_000)
        return [
            (tp.partition, r.offset, r.value)
            for tp, records in fetched.items()
            for r in records
            if r.value is not None
        ]

    async def lag(self) -> int | None:
        """Records between each partition's position and its high-water mark."""
        total = 0
        for tp in self.partitions:
            high = self._consumer.highwater(tp)
            if high is None:
                return None
            total += max(0, high - await self._consumer.position(tp))
        return total


async def _flush(
    store: ProjectionStore,
    projection: Projection[Any],
    generation: int,
    topic: str,
    dirty: dict[Key, Folded[Any]],
    next_offsets: dict[int, int],
) -> None:
    async with store.transaction() as tx:
        await write_states(tx, projection, generation, dirty)
        await tx.store_offsets(projection.name, generation, topic, next_offsets)
    dirty.clear()


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


class _Replay:
    """The fold of the source topic in memory, flushed now and then into the new generation."""

    def __init__(
        self, store: ProjectionStore, projection: Projection[Any], generation: int, topic: str
    ) -> None:
        self.store = store
        self.projection = projection
        self.generation = generation
        self.topic = topic
        self.states: dict[Key, Folded[Any]] = {}
        self.dirty: dict[Key, Folded[Any]] = {}
        self.next_offsets: dict[int, int] = {}
        self.events = 0
        self.healed = 0

    async def add(self, batch: list[tuple[int, int, bytes]]) -> None:
        by_session: dict[Key, list[Event]] = {}
        for partition, offset, value in batch:
            event = Event.from_record(value)
            by_session.setdefault(event.key, []).append(event)
            self.next_offsets[partition] = offset + 1
        for key, session_events in by_session.items():
            folded = self.states.get(key) or Folded(0, self.projection.initial())
            folded, run, filled = await advance(
                self.store, self.projection, folded, key, session_events
            )
            self.healed += filled
            if run:
                self.states[key] = self.dirty[key] = folded
        self.events += len(batch)

    async def flush(self) -> None:
        if self.dirty:
            await _flush(
                self.store,
                self.projection,
                self.generation,
                self.topic,
                self.dirty,
                self.next_offsets,
            )


async def rebuild(
    store: ProjectionStore,
    bootstrap: str,
    name: str,
    *,
    topic_prefix: str = "",
    flush_every: int = 250_000,
    on_progress: Callable[[Progress], None] = lambda progress: None,
) -> RebuildReport:
    """Replay the source topic from offset zero into a new generation and make it live."""
    projection = next((p for p in ALL if p.name == name), None)
    if projection is None:
        raise UnknownProjection(f"no read model named {name!r}")
    topic = EVENTS.full_name(topic_prefix)
    started = time.monotonic()
    replay = _Replay(store, projection, await store.new_generation(name), topic)
    reader = _Reader(bootstrap, topic)
    await reader.start()
    try:
        while True:
            batch = await reader.batch()
            await replay.add(batch)
            lag = await reader.lag()
            elapsed = max(time.monotonic() - started, 1e-6)
            on_progress(Progress(replay.events, lag, replay.events / elapsed))
            if replay.events % flush_every < len(batch) or lag == 0:
                await replay.flush()
            if lag == 0:
                break
        await replay.flush()
        healed = replay.healed + await _switch(store, projection, replay.generation)
    finally:
        await reader.stop()
    return RebuildReport(
        projection=name,
        generation=replay.generation,
        events=replay.events,
        sessions=len(replay.states),
        healed_from_ledger=healed,
        seconds=time.monotonic() - started,
    )
