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

import asyncpg
from aiokafka import AIOKafkaConsumer, TopicPartition

from keel_stream.errors import UnknownProjection
from keel_stream.projector.applier import advance, fold_sessions, store_offsets, write_states
from keel_stream.projector.events import LedgerEvent
from keel_stream.store.sqlfiles import query
from projections import ALL
from projections.base import Folded, Projection
from topics.catalog import EVENTS

__all__ = ["Progress", "RebuildReport", "rebuild"]

Key = tuple[str, str]


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
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=8 * 1024 * 1024,
        )
        self._topic = topic
        self.partitions: list[TopicPartition] = []

    async def start(self) -> None:
        await self._consumer.start()
        await self._consumer.topics()
        numbers = self._consumer.partitions_for_topic(self._topic) or set()
        self.partitions = [TopicPartition(self._topic, p) for p in sorted(numbers)]
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
    conn: asyncpg.Connection,
    projection: Projection[Any],
    generation: int,
    topic: str,
    dirty: dict[Key, Folded[Any]],
    next_offsets: dict[int, int],
) -> None:
    async with conn.transaction():
        await write_states(conn, projection, generation, dirty)
        await store_offsets(conn, projection.name, generation, topic, next_offsets)
    dirty.clear()


async def _ledger_fill(
    conn: asyncpg.Connection, key: Key, after: int, upto: int
) -> list[LedgerEvent]:
    rows = await conn.fetch(query("ledger_range"), key[0], key[1], after, upto)
    return [LedgerEvent.from_row(key[0], key[1], r) for r in rows]


async def _level(
    conn: asyncpg.Connection,
    projection: Projection[Any],
    old: int | None,
    new: int,
    *,
    to_ledger: bool,
) -> int:
    """Bring the new generation level with the old one (or the ledger head) from the ledger."""
    rows = await conn.fetch(
        query("projection_behind_generation"), projection.name, old or 0, new, to_ledger
    )
    events = {}
    for r in rows:
        key = (r["tenant_id"], r["session_id"])
        events[key] = await _ledger_fill(conn, key, r["applied"], r["target"])
    if not events:
        return 0
    changed, applied, _ = await fold_sessions(conn, projection, new, events)
    await write_states(conn, projection, new, changed)
    return len(applied)


async def rebuild(
    pool: asyncpg.Pool,
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
    async with pool.acquire() as conn:
        generation = int(await conn.fetchval(query("projection_new_generation"), name))
    reader = _Reader(bootstrap, topic)
    states: dict[Key, Folded[Any]] = {}
    dirty: dict[Key, Folded[Any]] = {}
    next_offsets: dict[int, int] = {}
    events = healed = 0
    await reader.start()
    try:
        async with pool.acquire() as conn:
            while True:
                batch = await reader.batch()
                by_session: dict[Key, list[LedgerEvent]] = {}
                for partition, offset, value in batch:
                    event = LedgerEvent.from_record(value)
                    by_session.setdefault(event.key, []).append(event)
                    next_offsets[partition] = offset + 1
                for key, session_events in by_session.items():
                    folded = states.get(key) or Folded(0, projection.initial())
                    folded, run, filled = await advance(
                        conn, projection, folded, key, session_events
                    )
                    healed += filled
                    if run:
                        states[key] = dirty[key] = folded
                events += len(batch)
                lag = await reader.lag()
                elapsed = max(time.monotonic() - started, 1e-6)
                on_progress(Progress(events, lag, events / elapsed))
                if len(dirty) and (events % flush_every < len(batch) or lag == 0):
                    await _flush(conn, projection, generation, topic, dirty, next_offsets)
                if lag == 0:
                    break
            await _flush(conn, projection, generation, topic, dirty, next_offsets)
            healed += await _level(conn, projection, None, generation, to_ledger=True)
            async with conn.transaction():
                rows = await conn.fetch(query("projection_lock_generations"), name)
                old = next((r["generation"] for r in rows if r["status"] == "live"), None)
                healed += await _level(conn, projection, old, generation, to_ledger=False)
                await conn.execute(query("projection_switch"), name, generation)
                await conn.execute(query("projection_notify"), "switched")
    finally:
        await reader.stop()
    return RebuildReport(
        projection=name,
        generation=generation,
        events=events,
        sessions=len(states),
        healed_from_ledger=healed,
        seconds=time.monotonic() - started,
    )
