"""Parked sessions and dead records: what the projector could not apply, kept in sight.

A session is parked per projection (and generation) when its fold raised or PostgreSQL refused
the state it produced: its state stays at the last seq applied, the rest of the batch and the
partition go on, and the session is tried again once its entry is due (30 s after the first
failure, doubling up to an hour) or as soon as the entry is deleted (`unpark`). A dead record is
a source record that did not decode as an event at all.

The projector reaches this store through its projection store's `parked()`: the PostgreSQL
tables on the same pool, or the memory projection store's own stand-in.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Final, Protocol

import asyncpg

from keel_stream.errors import StoreError
from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query

__all__ = [
    "Key",
    "MemoryParked",
    "ParkedSession",
    "ParkedStore",
    "PostgresParked",
    "refused_by_store",
]

Key = tuple[str, str]
"""(tenant, session)."""

_REFUSALS: Final = ("22", "54")  # data exception, program limit exceeded
_FIRST_RETRY_S: Final = 30.0
_LAST_RETRY_S: Final = 3600.0
_LIST_LIMIT: Final = 1000


def refused_by_store(exc: BaseException) -> bool:
    """True when PostgreSQL refused what was written for what it is, so writing it again would
    fail the same way: a data exception or a program limit (SQLSTATE classes 22 and 54), as for
    a value jsonb cannot hold or a document over jsonb's size limit."""
    cause = exc.__cause__ if isinstance(exc, StoreError) else None
    state = getattr(cause, "sqlstate", None)
    return isinstance(state, str) and state[:2] in _REFUSALS


@dataclass(frozen=True, slots=True)
class ParkedSession:
    """A session one generation of a projection could not apply, from `seq` on."""

    tenant: str
    session: str
    projection: str
    generation: int
    seq: int
    error: str
    attempts: int = 1
    due: bool = False
    """Its next try is due: the projector applies it again when it next meets it."""
    parked_at: datetime | None = None

    @property
    def key(self) -> Key:
        return (self.tenant, self.session)

    @property
    def slot(self) -> tuple[str, int, Key]:
        """(projection, generation, key): what a parked entry is unique by."""
        return (self.projection, self.generation, self.key)


class ParkedStore(Protocol):
    async def park(self, entries: Sequence[ParkedSession]) -> None:
        """Park sessions, or count one more failure of those parked already."""
        ...

    async def among(self, keys: Sequence[Key]) -> list[ParkedSession]:
        """The parked entries of these sessions, with whether each is due for another try."""
        ...

    async def release(self, entries: Sequence[ParkedSession]) -> None:
        """Entries whose sessions applied after all."""
        ...

    async def held(self) -> set[tuple[str, int, Key]]:
        """The slots of entries not yet due for another try."""
        ...

    async def listing(
        self, projection: str | None = None, limit: int = _LIST_LIMIT
    ) -> list[ParkedSession]:
        """Parked sessions, the longest parked first."""
        ...

    async def counts(self) -> dict[tuple[str, int], int]:
        """Parked sessions per (projection, generation)."""
        ...

    async def unpark(
        self, projection: str | None = None, tenant: str | None = None, session: str | None = None
    ) -> int:
        """Delete entries (all, or those matching), so they are tried at once; how many."""
        ...

    async def dead_record(
        self, topic: str, partition: int, offset: int, error: str, value: bytes
    ) -> None:
        """Keep a source record that did not decode (its first KiB)."""
        ...

    async def dead_records(self, topic: str) -> int: ...


def _parked(r: asyncpg.Record) -> ParkedSession:
    return ParkedSession(
        r["tenant_id"],
        r["session_id"],
        r["projection"],
        r["generation"],
        r["seq"],
        r["error"],
        r["attempts"],
        r["due"],
        r["parked_at"],
    )


class PostgresParked:
    """Implements ParkedStore on the projection_parked and projection_dead_records tables."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def park(self, entries: Sequence[ParkedSession]) -> None:
        if not entries:
            return
        async with translated("park sessions"):
            await self._pool.execute(
                query("projection_park"),
                [e.tenant for e in entries],
                [e.session for e in entries],
                [e.projection for e in entries],
                [e.generation for e in entries],
                [e.seq for e in entries],
                [e.error for e in entries],
            )

    async def among(self, keys: Sequence[Key]) -> list[ParkedSession]:
        if not keys:
            return []
        async with translated("read parked sessions"):
            rows = await self._pool.fetch(
                query("projection_parked_among"), [k[0] for k in keys], [k[1] for k in keys]
            )
        return [_parked(r) for r in rows]

    async def release(self, entries: Sequence[ParkedSession]) -> None:
        if not entries:
            return
        async with translated("release parked sessions"):
            await self._pool.execute(
                query("projection_parked_release"),
                [e.tenant for e in entries],
                [e.session for e in entries],
                [e.projection for e in entries],
                [e.generation for e in entries],
            )

    async def held(self) -> set[tuple[str, int, Key]]:
        async with translated("read held parked sessions"):
            rows = await self._pool.fetch(query("projection_parked_held"))
        return {(r["projection"], r["generation"], (r["tenant_id"], r["session_id"])) for r in rows}

    async def listing(
        self, projection: str | None = None, limit: int = _LIST_LIMIT
    ) -> list[ParkedSession]:
        async with translated("list parked sessions"):
            rows = await self._pool.fetch(query("projection_parked_list"), projection, limit)
        return [_parked(r) for r in rows]

    async def counts(self) -> dict[tuple[str, int], int]:
        async with translated("count parked sessions"):
            rows = await self._pool.fetch(query("projection_parked_counts"))
        return {(r["projection"], r["generation"]): int(r["sessions"]) for r in rows}

    async def unpark(
        self, projection: str | None = None, tenant: str | None = None, session: str | None = None
    ) -> int:
        async with translated("unpark sessions"):
            count = await self._pool.fetchval(
                query("projection_unpark"), projection, tenant, session
            )
        return int(count)

    async def dead_record(
        self, topic: str, partition: int, offset: int, error: str, value: bytes
    ) -> None:
        async with translated("keep a dead record"):
            await self._pool.execute(
                query("projection_dead_record"), topic, partition, offset, error, value[:1024]
            )

    async def dead_records(self, topic: str) -> int:
        async with translated("count dead records"):
            count = await self._pool.fetchval(query("projection_dead_records_count"), topic)
        return int(count)


@dataclass(slots=True)
class _Entry:
    parked: ParkedSession
    retry_at: float


class MemoryParked:
    """Implements ParkedStore in memory, with the same back-off (on a monotonic clock)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, int, Key], _Entry] = {}
        self._dead: dict[tuple[str, int, int], str] = {}

    def _view(self, entry: _Entry) -> ParkedSession:
        return replace(entry.parked, due=entry.retry_at <= time.monotonic())

    async def park(self, entries: Sequence[ParkedSession]) -> None:
        now = time.monotonic()
        for e in entries:
            old = self._entries.get(e.slot)
            attempts = 1 if old is None else old.parked.attempts + 1
            delay = min(_FIRST_RETRY_S * 2 ** min(attempts - 1, 10), _LAST_RETRY_S)
            since = datetime.now(UTC) if old is None else old.parked.parked_at
            parked = replace(e, attempts=attempts, due=False, parked_at=since)
            self._entries[e.slot] = _Entry(parked, now + delay)

    async def among(self, keys: Sequence[Key]) -> list[ParkedSession]:
        wanted = set(keys)
        return [self._view(e) for slot, e in self._entries.items() if slot[2] in wanted]

    async def release(self, entries: Sequence[ParkedSession]) -> None:
        for e in entries:
            self._entries.pop(e.slot, None)

    async def held(self) -> set[tuple[str, int, Key]]:
        now = time.monotonic()
        return {slot for slot, e in self._entries.items() if e.retry_at > now}

    async def listing(
        self, projection: str | None = None, limit: int = _LIST_LIMIT
    ) -> list[ParkedSession]:
        found = [self._view(e) for e in self._entries.values()]
        found = [p for p in found if projection is None or p.projection == projection]
        return found[:limit]

    async def counts(self) -> dict[tuple[str, int], int]:
        counted: dict[tuple[str, int], int] = {}
        for projection, generation, _ in self._entries:
            counted[(projection, generation)] = counted.get((projection, generation), 0) + 1
        return counted

    async def unpark(
        self, projection: str | None = None, tenant: str | None = None, session: str | None = None
    ) -> int:
        gone = [
            slot
            for slot, e in self._entries.items()
            if projection in (None, e.parked.projection)
            and tenant in (None, e.parked.tenant)
            and session in (None, e.parked.session)
        ]
        for slot in gone:
            del self._entries[slot]
        return len(gone)

    async def dead_record(
        self, topic: str, partition: int, offset: int, error: str, value: bytes
    ) -> None:
        self._dead.setdefault((topic, partition, offset), error)

    async def dead_records(self, topic: str) -> int:
        return sum(1 for t, _, _ in self._dead if t == topic)
