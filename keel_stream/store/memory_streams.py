"""The projection state over a MemoryLedger: the applier's side, for unit tests.

MemoryProjectionStore keeps projection_state's rules: a transaction commits when its block ends
without an error, else leaves nothing behind; a state never moves backwards, nor an offset; both
need their generation; notices reach subscribers at commit, identical ones once. Transactions run
one at a time (one lock stands in for the row locks): every outcome is one PostgreSQL could give.
The reconcile's scans (sessions_behind*, sweep_end) read the ledger's sessions in key order.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson

from keel_stream.errors import StoreError, StoreUnavailable
from keel_stream.kernel.types import Event
from keel_stream.store.memory_ledger import MemoryLedger
from keel_stream.store.projection_parked import MemoryParked, ParkedStore
from keel_stream.store.projection_state import (
    Behind,
    Generation,
    Key,
    ProjectionTransaction,
    StoredState,
    Subscription,
)

__all__ = ["SEEDED", "MemoryProjectionStore", "MemoryProjectionTransaction"]

SEEDED: Final = ("transcript", "run_status", "sse")
"""The projections the migrations make live at generation 1."""
_LEDGER_END: Final = 2**62
_LIVE: Final = "live"


def _ledger_range(
    ledger: MemoryLedger, tenant: str, session: str, after: int, upto: int
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

    def __init__(self, ledger: MemoryLedger, tables: _Tables) -> None:
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
    """The applier's side of ProjectionStore (and LedgerReader) over a MemoryLedger's ledger:
    transactions, generations, offsets, the read of one state and notifications."""

    def __init__(self, ledger: MemoryLedger, live: Iterable[str] = SEEDED) -> None:
        """`live`: the projections that have a live generation 1, as migrated."""
        self._ledger = ledger
        now = datetime.now(UTC)
        self._tables = _Tables({(p, 1): _Generation(_LIVE, now) for p in live}, {}, {})
        self._lock = asyncio.Lock()
        self._subscribers: list[Callable[[str], None]] = []
        self._parked = MemoryParked()

    def parked(self) -> ParkedStore:
        return self._parked

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

    def _behind(self, projection: str, generation: int, keys: Iterable[Key]) -> list[Behind]:
        """The sessions among `keys` the generation has applied short of their head."""
        found = []
        for key in keys:
            head = len(self._ledger.session(*key).events)
            applied = self._tables.applied(projection, generation, key)
            if head > applied:
                found.append(Behind(key[0], key[1], applied, head))
        return found

    def _idle(self, behind: list[Behind], idle_s: float, limit: int) -> list[Behind]:
        """Those whose last event is older than `idle_s`, at most `limit`."""
        before = datetime.now(UTC) - timedelta(seconds=idle_s)
        events = self._ledger.session
        idle = [b for b in behind if events(b.tenant, b.session).events[-1].committed_at < before]
        return idle[:limit]

    async def sessions_behind_ledger(self, projection: str, generation: int) -> int:
        return len(self._behind(projection, generation, self._ledger.session_keys()))

    async def sessions_behind(
        self, projection: str, generation: int, *, idle_s: float, limit: int, within_s: float
    ) -> list[Behind]:
        since = datetime.now(UTC) - timedelta(seconds=within_s)
        behind = self._behind(projection, generation, self._ledger.session_keys())
        recent = [
            b for b in behind if self._ledger.session(b.tenant, b.session).events[-1].committed_at
            >= since
        ]  # fmt: skip
        return self._idle(recent, idle_s, limit)

    async def sessions_behind_range(
        self, projection: str, generation: int, *, idle_s: float, limit: int, after: Key, upto: Key
    ) -> list[Behind]:
        keys = [k for k in self._ledger.session_keys() if after < k <= upto]
        return self._idle(self._behind(projection, generation, keys), idle_s, limit)

    async def sweep_end(self, after: Key, page: int) -> Key | None:
        keys = [k for k in self._ledger.session_keys() if k > after][:page]
        return keys[-1] if keys else None

    async def read_state(self, projection: str, tenant: str, session: str) -> StoredState | None:
        generation = self._tables.live().get(projection)
        state = self._tables.states.get((projection, generation or 0, tenant, session))
        return None if state is None else _copied(state)

    def notifications(self, on_notify: Callable[[str], None]) -> Subscription:
        return _Subscription(self._subscribers, on_notify)
