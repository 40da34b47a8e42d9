"""Service heartbeats: which background services run now, as rows each process beats while it
runs (migration 0048), on PostgreSQL or in memory.

A row is fresh while its last beat is within MISSED_BEATS of its own interval of the store's
clock (the database's now on PostgreSQL): the reader's clock and settings play no part.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

import asyncpg

from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query

__all__ = [
    "MISSED_BEATS",
    "PRUNE_AFTER_S",
    "MemoryServiceHeartbeats",
    "PostgresServiceHeartbeats",
    "ServiceHeartbeats",
    "ServiceKind",
]

MISSED_BEATS: Final = 3
"""A service whose last beat is older than this many of its intervals is not running."""
PRUNE_AFTER_S: Final = 3600.0
"""Rows stale for this long (processes killed long ago) are pruned by the next beat."""


class ServiceKind(StrEnum):
    HOOKS_SENDER = "hooks_sender"
    """`keel-stream hooks run`: sends hook deliveries (and dispatches them, with a broker)."""
    TRIGGER_SCHEDULER = "trigger_scheduler"
    """`keel-stream triggers run`: fires due triggers."""


class ServiceHeartbeats(Protocol):
    async def beat(self, kind: ServiceKind, instance: str, interval_s: float) -> None:
        """The instance runs now and beats again within interval_s."""
        ...

    async def end(self, kind: ServiceKind, instance: str) -> None:
        """The instance stopped: it no longer counts, at once."""
        ...

    async def running(self) -> Mapping[ServiceKind, int]:
        """How many fresh instances of each kind run now (kinds with none are absent)."""
        ...


class PostgresServiceHeartbeats:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def beat(self, kind: ServiceKind, instance: str, interval_s: float) -> None:
        async with translated("record a service heartbeat"):
            await self._pool.execute(
                query("service_heartbeat_beat"), kind.value, instance, interval_s, PRUNE_AFTER_S
            )

    async def end(self, kind: ServiceKind, instance: str) -> None:
        async with translated("remove a service heartbeat"):
            await self._pool.execute(query("service_heartbeat_end"), kind.value, instance)

    async def running(self) -> Mapping[ServiceKind, int]:
        async with translated("read the service heartbeats"):
            rows = await self._pool.fetch(query("service_heartbeats_fresh"), float(MISSED_BEATS))
        return {ServiceKind(r["kind"]): int(r["instances"]) for r in rows}


@dataclass(slots=True)
class _Beat:
    at: float
    interval_s: float


class MemoryServiceHeartbeats:
    """The same rules in memory, by `clock` (seconds, monotonic)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._beats: dict[tuple[ServiceKind, str], _Beat] = {}

    async def beat(self, kind: ServiceKind, instance: str, interval_s: float) -> None:
        self._beats[(kind, instance)] = _Beat(self._clock(), interval_s)

    async def end(self, kind: ServiceKind, instance: str) -> None:
        self._beats.pop((kind, instance), None)

    async def running(self) -> Mapping[ServiceKind, int]:
        now = self._clock()
        counts: dict[ServiceKind, int] = {}
        for (kind, _), beat in self._beats.items():
            if now - beat.at < MISSED_BEATS * beat.interval_s:
                counts[kind] = counts.get(kind, 0) + 1
        return counts
