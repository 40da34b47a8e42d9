"""Applying events to the live read models: one PostgreSQL transaction per batch.

For every live projection the batch's sessions are locked, their states folded forward (a seq
at or below the stored one is a no-op; a gap is filled from the ledger first), and the new
states are written together with the batch's source offsets. A redelivered batch therefore
changes nothing, and a processor that restarts resumes from the offsets stored with its state.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from keel_stream.projector.events import LedgerEvent, SourceRecord
from keel_stream.store.sqlfiles import query
from projections.base import Folded, Projection, fresh

__all__ = [
    "Applier",
    "BatchResult",
    "FrameSink",
    "advance",
    "fold_sessions",
    "live_generations",
    "store_offsets",
    "write_states",
]

Key = tuple[str, str]
FrameSink = Callable[[Sequence[LedgerEvent]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class BatchResult:
    applied: int
    """Events newly applied, summed over projections."""
    gap_filled: int
    """Events fetched from the ledger to fill gaps, summed over projections."""


async def live_generations(conn: asyncpg.Connection) -> dict[str, int]:
    rows = await conn.fetch(query("projection_live_generations"))
    return {r["projection"]: r["generation"] for r in rows}


async def _ledger_range(
    conn: asyncpg.Connection, key: Key, after: int, upto: int
) -> list[LedgerEvent]:
    rows = await conn.fetch(query("ledger_range"), key[0], key[1], after, upto)
    return [LedgerEvent.from_row(key[0], key[1], r) for r in rows]


async def fold_sessions(
    conn: asyncpg.Connection,
    projection: Projection[Any],
    generation: int,
    events: Mapping[Key, Sequence[LedgerEvent]],
) -> tuple[dict[Key, Folded[Any]], list[LedgerEvent], int]:
    """Fold each session's events onto its locked stored state.

    Returns the changed states, the events applied (in order, per session) and how many were
    fetched from the ledger to fill gaps.
    """
    keys = sorted(events)
    rows = await conn.fetch(
        query("projection_lock_states"),
        projection.name,
        generation,
        [k[0] for k in keys],
        [k[1] for k in keys],
    )
    stored = {
        (r["tenant_id"], r["session_id"]): Folded(r["last_seq"], projection.load(r["state"]))
        for r in rows
    }
    changed: dict[Key, Folded[Any]] = {}
    applied: list[LedgerEvent] = []
    filled = 0
    for key in keys:
        folded = stored.get(key) or Folded(0, projection.initial())
        advanced, run, from_ledger = await advance(conn, projection, folded, key, events[key])
        if run:
            changed[key] = advanced
            applied.extend(run)
            filled += from_ledger
    return changed, applied, filled


async def advance(
    conn: asyncpg.Connection,
    projection: Projection[Any],
    folded: Folded[Any],
    key: Key,
    events: Sequence[LedgerEvent],
) -> tuple[Folded[Any], list[LedgerEvent], int]:
    """Fold a session's new events onto its state, filling gaps from the ledger first.

    Returns the new state, the events it applied in seq order, and how many came from the ledger.
    """
    run: list[LedgerEvent] = []
    filled = 0
    expected = folded.last_seq + 1
    for event in sorted(events, key=lambda e: e.seq):
        if event.seq < expected:
            continue  # already applied, or a duplicate within the batch
        if event.seq > expected:
            missing = await _ledger_range(conn, key, expected - 1, event.seq - 1)
            run.extend(missing)
            filled += len(missing)
        run.append(event)
        expected = event.seq + 1
    if not run:
        return folded, [], 0
    run = fresh(run, folded.last_seq)
    return Folded(run[-1].seq, projection.apply_many(folded.state, run)), run, filled


async def write_states(
    conn: asyncpg.Connection,
    projection: Projection[Any],
    generation: int,
    changed: Mapping[Key, Folded[Any]],
) -> None:
    if not changed:
        return
    keys = list(changed)
    await conn.execute(
        query("projection_upsert_states"),
        projection.name,
        generation,
        [k[0] for k in keys],
        [k[1] for k in keys],
        [changed[k].last_seq for k in keys],
        [projection.dump(changed[k].state) for k in keys],
    )


async def store_offsets(
    conn: asyncpg.Connection,
    projection: str,
    generation: int,
    topic: str,
    next_offsets: Mapping[int, int],
) -> None:
    if next_offsets:
        partitions = sorted(next_offsets)
        await conn.execute(
            query("projection_store_offsets"),
            projection,
            generation,
            topic,
            partitions,
            [next_offsets[p] for p in partitions],
        )


def group_by_session(events: Iterable[LedgerEvent]) -> dict[Key, list[LedgerEvent]]:
    grouped: dict[Key, list[LedgerEvent]] = defaultdict(list)
    for event in events:
        grouped[event.key].append(event)
    return dict(grouped)


class Applier:
    """Applies batches to every live projection; the sse projection's events go to a sink."""

    def __init__(
        self,
        projections: Sequence[Projection[Any]],
        topic: str,
        frame_sink: FrameSink | None = None,
        frames_of: str = "sse",
    ) -> None:
        self._projections = projections
        self._topic = topic
        self._frame_sink = frame_sink
        self._frames_of = frames_of

    async def apply(self, conn: asyncpg.Connection, records: Sequence[SourceRecord]) -> BatchResult:
        """Apply records from the source topic and store their offsets, in one transaction."""
        next_offsets: dict[int, int] = {}
        for record in records:
            next_offsets[record.partition] = max(
                next_offsets.get(record.partition, 0), record.offset + 1
            )
        return await self.apply_events(conn, [r.event for r in records], next_offsets)

    async def apply_events(
        self,
        conn: asyncpg.Connection,
        events: Sequence[LedgerEvent],
        next_offsets: Mapping[int, int] | None = None,
    ) -> BatchResult:
        grouped = group_by_session(events)
        applied_total = filled_total = 0
        async with conn.transaction():
            live = await live_generations(conn)
            for projection in self._projections:
                generation = live[projection.name]
                changed, applied, filled = await fold_sessions(
                    conn, projection, generation, grouped
                )
                applied_total += len(applied)
                filled_total += filled
                if projection.name == self._frames_of and applied and self._frame_sink:
                    # Frames go out before the transaction commits: if publishing fails, the
                    # state is not advanced and the batch is applied (and sent) again.
                    await self._frame_sink(applied)
                await write_states(conn, projection, generation, changed)
                await store_offsets(
                    conn, projection.name, generation, self._topic, next_offsets or {}
                )
            if applied_total:
                await conn.execute(query("projection_notify"), "applied")
        return BatchResult(applied=applied_total, gap_filled=filled_total)
