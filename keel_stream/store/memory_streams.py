"""The projection state and the outbox over a MemoryStore: the stream side, for unit tests.

MemoryProjectionStore keeps projection_state's rules: a transaction commits when its block ends
without an error, else leaves nothing behind; a state never moves backwards, nor an offset; both
need their generation; notices reach subscribers at commit, identical ones once. Transactions run
one at a time (one lock stands in for the row locks): every outcome is one PostgreSQL could give.
It serves the applier and the read of one state, not the reconcile's scans (sessions_behind*).

MemoryOutbox keeps the outbox's: a commit queues a row (ids follow seq per session); a shard
fetches its oldest rows in id order; a row leaves only when acknowledged; one connection at a time
leads a shard, until it ends; a commit wakes the connections listening. A shard is the tenants
whose hash modulo the count is its index (crc32 here, hashtext in PostgreSQL).
"""

from __future__ import annotations

import asyncio
import itertools
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from keel_stream.errors import StoreError, StoreUnavailable
from keel_stream.kernel.types import Event
from keel_stream.store.memory import MemoryStore
from keel_stream.store.outbox import Backlog, OutboxRow, RepublishReport, Shard, ShardConnection
from keel_stream.store.projection_state import (
    Behind,
    Generation,
    Key,
    ProjectionTransaction,
    StoredState,
    Subscription,
)

__all__ = ["SEEDED", "MemoryOutbox", "MemoryProjectionStore", "MemoryProjectionTransaction"]

SEEDED: Final = ("transcript", "run_status", "sse")
"""The projections the migrations make live at generation 1."""
_LEDGER_END: Final = 2**62
_LIVE: Final = "live"


def _ledger_range(
    ledger: MemoryStore, tenant: str, session: str, after: int, upto: int
) -> list[Event]:
    found = ledger.find(tenant, session)
    return [] if found is None else found.events[max(after, 0) : max(upto, 0)]  # seq is dense


def _json(state: Mapping[str, Any]) -> dict[str, Any]:
    """The state as the jsonb column gives it back (keel's orjson codec): a copy, JSON only."""
    value: dict[str, Any] = orjson.loads(orjson.dumps(state))
    return value


def _copied(state: StoredState) -> StoredState:
    return StoredState(state.last_seq, _json(state.state))


@dataclass(frozen=True, slots=True)
class _Generation:
    status: str
    live_at: datetime | None


@dataclass(slots=True)
class _Tables:
    """projection_generations, projection_states and projection_offsets."""

    generations: dict[tuple[str, int], _Generation]
    states: dict[tuple[str, int, str, str], StoredState]
    offsets: dict[tuple[str, int, str, int], int]

    def copy(self) -> _Tables:
        return _Tables(dict(self.generations), dict(self.states), dict(self.offsets))

    def live(self) -> dict[str, int]:
        return {p: g for (p, g), row in self.generations.items() if row.status == _LIVE}

    def applied(self, projection: str, generation: int, key: Key) -> int:
        state = self.states.get((projection, generation, key[0], key[1]))
        return 0 if state is None else state.last_seq


class MemoryProjectionTransaction:
    """Implements ProjectionTransaction on a copy of the tables, which replaces them at commit.

    A statement that fails aborts the transaction: later statements fail, and it rolls back."""

    def __init__(self, ledger: MemoryStore, tables: _Tables) -> None:
        self._ledger = ledger
        self._tables: _Tables | None = tables
        self._aborted = False
        self._notices: list[str] = []

    def end(self) -> tuple[_Tables | None, list[str]]:
        """The tables to commit (None if aborted) and the notices; the transaction is over."""
        tables, self._tables = self._tables, None
        return (None if self._aborted else tables), self._notices

    def _open(self) -> _Tables:
        if self._tables is None:
            raise StoreUnavailable("projection transaction: it has ended")
        if self._aborted:
            raise StoreError("projection transaction: aborted by an earlier failed statement")
        return self._tables

    def _references(self, action: str, tables: _Tables, projection: str, generation: int) -> None:
        """The foreign key to projection_generations."""
        if (projection, generation) not in tables.generations:
            self._aborted = True
            raise StoreError(f"{action}: ForeignKeyViolationError: {projection} {generation}")

    async def ledger_range(
        self, tenant: str, session: str, after: int, upto: int = _LEDGER_END
    ) -> list[Event]:
        self._open()
        return _ledger_range(self._ledger, tenant, session, after, upto)

    async def live_generations(self) -> dict[str, int]:
        return self._open().live()

    async def lock_states(
        self, projection: str, generation: int, keys: Sequence[Key]
    ) -> dict[Key, StoredState]:
        tables = self._open()
        rows = {k: tables.states.get((projection, generation, *k)) for k in sorted(set(keys))}
        return {k: _copied(state) for k, state in rows.items() if state is not None}

    async def write_states(
        self, projection: str, generation: int, states: Mapping[Key, StoredState]
    ) -> None:
        tables = self._open()
        if not states:
            return
        self._references("write projection states", tables, projection, generation)
        for (tenant, session), new in states.items():
            row = (projection, generation, tenant, session)
            old = tables.states.get(row)
            if old is None or old.last_seq < new.last_seq:
                tables.states[row] = StoredState(new.last_seq, _json(new.state))

    async def store_offsets(
        self, projection: str, generation: int, topic: str, next_offsets: Mapping[int, int]
    ) -> None:
        tables = self._open()
        if not next_offsets:
            return
        self._references("store projection offsets", tables, projection, generation)
        for partition, offset in next_offsets.items():
            row = (projection, generation, topic, partition)
            tables.offsets[row] = max(tables.offsets.get(row, offset), offset)

    async def lock_generations(self, projection: str) -> dict[int, str]:
        rows = sorted(self._open().generations.items())
        return {g: row.status for (p, g), row in rows if p == projection}

    async def behind_generation(
        self, projection: str, old: int | None, new: int, *, to_ledger: bool
    ) -> list[Behind]:
        tables = self._open()
        behind: list[Behind] = []
        for key in self._ledger.session_keys():
            applied = tables.applied(projection, new, key)
            if to_ledger:
                target = await self._ledger.head(*key)
            else:
                target = tables.applied(projection, old or 0, key)
            if applied < target:
                behind.append(Behind(key[0], key[1], applied, target))
        return behind

    async def switch(self, projection: str, generation: int) -> None:
        tables = self._open()
        now = datetime.now(UTC)
        for (p, g), row in list(tables.generations.items()):
            if p == projection and g == generation:
                tables.generations[(p, g)] = _Generation(_LIVE, now)
            elif p == projection and row.status == _LIVE:
                tables.generations[(p, g)] = replace(row, status="retired")

    async def notify(self, what: str) -> None:
        self._open()
        self._notices.append(what)


class _Subscription:
    def __init__(self, subscribers: list[Callable[[str], None]], on: Callable[[str], None]) -> None:
        self._subscribers = subscribers
        self._on = on

    async def start(self) -> None:
        self._subscribers.append(self._on)

    async def stop(self) -> None:
        if self._on in self._subscribers:
            self._subscribers.remove(self._on)


class MemoryProjectionStore:
    """The applier's side of ProjectionStore (and LedgerReader) over a MemoryStore's ledger:
    transactions, generations, offsets, the read of one state and notifications."""

    def __init__(self, ledger: MemoryStore, live: Iterable[str] = SEEDED) -> None:
        """`live`: the projections that have a live generation 1, as migrated."""
        self._ledger = ledger
        now = datetime.now(UTC)
        self._tables = _Tables({(p, 1): _Generation(_LIVE, now) for p in live}, {}, {})
        self._lock = asyncio.Lock()
        self._subscribers: list[Callable[[str], None]] = []

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[ProjectionTransaction]:
        async with self._lock:
            tx = MemoryProjectionTransaction(self._ledger, self._tables.copy())
            try:
                yield tx
            finally:
                tables, notices = tx.end()
            if tables is None:
                return
            self._tables = tables
            for what in dict.fromkeys(notices):  # NOTIFY: identical payloads once per commit
                for on_notify in list(self._subscribers):
                    on_notify(what)

    async def ledger_range(
        self, tenant: str, session: str, after: int, upto: int = _LEDGER_END
    ) -> list[Event]:
        return _ledger_range(self._ledger, tenant, session, after, upto)

    async def live_generations(self) -> dict[str, int]:
        return self._tables.live()

    async def offsets(self, projection: str, generation: int, topic: str) -> dict[int, int]:
        return {
            partition: offset
            for (p, g, t, partition), offset in sorted(self._tables.offsets.items())
            if (p, g, t) == (projection, generation, topic)
        }

    async def new_generation(self, projection: str) -> int:
        async with self._lock:
            numbers = [g for p, g in self._tables.generations if p == projection]
            generation = max(numbers, default=0) + 1
            self._tables.generations[(projection, generation)] = _Generation("building", None)
        return generation

    async def generations(self) -> list[Generation]:
        sessions = Counter((p, g) for p, g, _, _ in self._tables.states)
        return [
            Generation(p, g, row.status, sessions[(p, g)], row.live_at)
            for (p, g), row in sorted(self._tables.generations.items())
        ]

    async def read_state(self, projection: str, tenant: str, session: str) -> StoredState | None:
        generation = self._tables.live().get(projection)
        state = self._tables.states.get((projection, generation or 0, tenant, session))
        return None if state is None else _copied(state)

    def notifications(self, on_notify: Callable[[str], None]) -> Subscription:
        return _Subscription(self._subscribers, on_notify)


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
    """Implements Outbox over a MemoryStore: every commit from now on queues a row; what the
    store holds already is queued at once, session by session (as a republish would)."""

    def __init__(self, ledger: MemoryStore) -> None:
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
