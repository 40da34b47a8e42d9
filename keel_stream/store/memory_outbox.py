"""The outbox over a MemoryLedger: the relay's side, for unit tests.

MemoryOutbox keeps the outbox's: a commit queues a row (ids follow seq per session); a shard
fetches its oldest rows in id order; a row leaves only when acknowledged; one connection at a time
leads a shard, until it ends; a commit wakes the connections listening. A shard is the tenants
whose hash modulo the count is its index (crc32 here, hashtext in PostgreSQL).
"""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

from keel_stream.errors import StoreUnavailable
from keel_stream.kernel.types import Event
from keel_stream.store.memory_ledger import MemoryLedger
from keel_stream.store.outbox import Backlog, OutboxRow, RepublishReport, Shard, ShardConnection

__all__ = ["MemoryOutbox"]


def _in_shard(tenant: str, shard: Shard) -> bool:
    """Whether the tenant's events are the shard's: a hash of the tenant id modulo the count."""
    return shard.count == 1 or zlib.crc32(tenant.encode()) % shard.count == shard.index


@dataclass(frozen=True, slots=True)
class _Queued:
    event: Event
    queued_at: float
    """The ledger's clock when the row was queued (created_at)."""


class _MemoryShard:
    """Implements ShardConnection: one connection to the outbox, for one shard."""

    def __init__(self, outbox: MemoryOutbox, shard: Shard) -> None:
        self.shard = shard
        self.ended = False
        self._outbox = outbox
        self._wake_ups: list[asyncio.Event] = []

    def _open(self) -> MemoryOutbox:
        if self.ended:
            raise StoreUnavailable(f"relay shard {self.shard.index}: the connection has ended")
        return self._outbox

    def woken(self) -> None:
        for wake in self._wake_ups:
            wake.set()

    async def try_lead(self) -> bool:
        return self._open().lead(self)

    async def fetch(self, limit: int) -> list[OutboxRow]:
        return self._open().batch(self.shard, limit)

    async def acknowledge(self, ids: Sequence[int]) -> None:
        self._open().delete(ids)

    async def backlog(self) -> Backlog:
        return self._open().backlog(self.shard)

    async def commit_wake_ups(self) -> asyncio.Event:
        self._open()
        wake = asyncio.Event()
        self._wake_ups.append(wake)
        return wake


class MemoryOutbox:
    """Implements Outbox over a MemoryLedger: every commit from now on queues a row; what the
    store holds already is queued at once, session by session (as a republish would)."""

    def __init__(self, ledger: MemoryLedger) -> None:
        self._ledger = ledger
        self._rows: dict[int, _Queued] = {}  # in id order: ids only grow
        self._queued: set[tuple[str, str, int]] = set()
        self._ids = itertools.count(1)
        self._leaders: dict[int, _MemoryShard] = {}
        self._connections: list[_MemoryShard] = []
        for tenant, session in ledger.session_keys():
            self._enqueue(tenant, session, after_seq=0)
        ledger.commit_listeners.append(self._committed)

    def _queue(self, event: Event) -> bool:
        """Queue one event; False if it waits already (the unique key)."""
        if (*event.key, event.seq) in self._queued:
            return False
        self._queued.add((*event.key, event.seq))
        self._rows[next(self._ids)] = _Queued(event, self._ledger.now())
        return True

    def _enqueue(self, tenant: str, session: str, after_seq: int) -> int:
        events = self._ledger.session(tenant, session).events[max(after_seq, 0) :]
        return sum(self._queue(e) for e in events)

    def _committed(self, event: Event) -> None:
        self._queue(event)
        for connection in self._connections:
            connection.woken()  # NOTIFY keel_commits

    def lead(self, connection: _MemoryShard) -> bool:
        holder = self._leaders.setdefault(connection.shard.index, connection)
        return holder is connection

    def batch(self, shard: Shard, limit: int) -> list[OutboxRow]:
        rows: list[OutboxRow] = []
        for row_id, queued in self._rows.items():
            if len(rows) >= limit:
                break
            e = queued.event
            if _in_shard(e.tenant, shard):
                rows.append(
                    OutboxRow(row_id, *e.key, e.seq, e.kind, e.payload, e.committed_at, e.metadata)
                )
        return rows

    def delete(self, ids: Iterable[int]) -> None:
        for row_id in ids:
            queued = self._rows.pop(row_id, None)
            if queued is not None:
                self._queued.discard((*queued.event.key, queued.event.seq))

    def backlog(self, shard: Shard) -> Backlog:
        now = self._ledger.now()
        ages = [now - q.queued_at for q in self._rows.values() if _in_shard(q.event.tenant, shard)]
        return Backlog(events=len(ages), oldest_s=max(ages, default=0.0))

    @asynccontextmanager
    async def shard(self, shard: Shard) -> AsyncIterator[ShardConnection]:
        connection = _MemoryShard(self, shard)
        self._connections.append(connection)
        try:
            yield connection
        finally:
            # The connection ends: its lock and its LISTEN go with it.
            connection.ended = True
            self._connections.remove(connection)
            if self._leaders.get(shard.index) is connection:
                del self._leaders[shard.index]

    async def republish(
        self, *, tenant: str | None = None, session: str | None = None, after_seq: int = 0
    ) -> RepublishReport:
        keys = self._ledger.session_keys()
        targets = [(t, s) for t, s in keys if tenant in (None, t) and session in (None, s)]
        events = sum(self._enqueue(t, s, after_seq) for t, s in targets)
        return RepublishReport(sessions=len(targets), events=events)
