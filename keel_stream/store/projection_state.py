"""Projection state: the read models, their generations and source offsets, in PostgreSQL.

A projection's states and the source offsets they include are written in one transaction
(`ProjectionStore.transaction()`), so a redelivered batch changes nothing and a processor
resumes from the offsets stored with its states. A state never moves backwards (the upsert
keeps the higher last_seq), whoever writes it. The transcript's state is a head here and its
entries are rows (keel_stream.store.projection_rows); its read assembles the document.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

import asyncpg

from keel_stream.kernel.types import Event
from keel_stream.store.driver_errors import translated
from keel_stream.store.notifications import PostgresListener
from keel_stream.store.projection_parked import Key, ParkedStore, PostgresParked
from keel_stream.store.projection_rows import TRANSCRIPT, TranscriptRowStatements, read_transcripts
from keel_stream.store.sqlfiles import query

__all__ = [
    "APPLIED",
    "SWITCHED",
    "Behind",
    "Generation",
    "Key",
    "LedgerReader",
    "PostgresProjectionStore",
    "ProjectionStore",
    "ProjectionTransaction",
    "StoredState",
    "Subscription",
]

PROJECTIONS_CHANNEL: Final = "keel_projections"
APPLIED: Final = "applied"
SWITCHED: Final = "switched"
_LEDGER_END: Final = 2**62


@dataclass(frozen=True, slots=True)
class StoredState:
    """A session's state in one generation, as JSON, and the last seq it includes."""

    last_seq: int
    state: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Behind:
    """A session a generation has applied up to `applied`, short of `target`."""

    tenant: str
    session: str
    applied: int
    target: int


@dataclass(frozen=True, slots=True)
class Generation:
    projection: str
    generation: int
    status: str
    sessions: int
    live_at: datetime | None


class Subscription(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


class LedgerReader(Protocol):
    async def ledger_range(
        self, tenant: str, session: str, after: int, upto: int = _LEDGER_END
    ) -> list[Event]:
        """The session's committed events with after < seq <= upto, in seq order."""
        ...


class ProjectionTransaction(LedgerReader, Protocol):
    """The statements of one transaction; it commits when the block ends without an error."""

    async def live_generations(self) -> dict[str, int]:
        """Each projection's live generation, share-locked: a switch waits for this batch."""
        ...

    async def lock_states(
        self, projection: str, generation: int, keys: Sequence[Key]
    ) -> dict[Key, StoredState]:
        """The stored states of these sessions (those that have one), locked in key order."""
        ...

    async def write_states(
        self, projection: str, generation: int, states: Mapping[Key, StoredState]
    ) -> None:
        """Upsert states; a stored state with a higher last_seq is kept."""
        ...

    async def store_offsets(
        self, projection: str, generation: int, topic: str, next_offsets: Mapping[int, int]
    ) -> None:
        """Record the next source offset per partition (an offset never moves back)."""
        ...

    async def lock_generations(self, projection: str) -> dict[int, str]:
        """The projection's generations and their status, locked against batches in flight."""
        ...

    async def behind_generation(
        self, projection: str, old: int | None, new: int, *, to_ledger: bool
    ) -> list[Behind]:
        """Sessions where generation `new` is behind `old` (or the ledger, with to_ledger)."""
        ...

    async def switch(self, projection: str, generation: int) -> None:
        """Make `generation` live and retire the one that was."""
        ...

    async def notify(self, what: str) -> None:
        """Tell readers (at commit) that models changed: APPLIED or SWITCHED."""
        ...


class ProjectionStore(LedgerReader, Protocol):
    """What the projector, the rebuild, the status command and the readers ask of the store."""

    def transaction(self) -> AbstractAsyncContextManager[ProjectionTransaction]:
        """A transaction; statements run through what the block receives."""
        ...

    async def live_generations(self) -> dict[str, int]: ...

    async def offsets(self, projection: str, generation: int, topic: str) -> dict[int, int]:
        """Per partition, the next source offset stored with the generation's states."""
        ...

    async def new_generation(self, projection: str) -> int:
        """A new 'building' generation, numbered after the last."""
        ...

    async def generations(self) -> list[Generation]: ...

    async def sessions_behind_ledger(self, projection: str, generation: int) -> int: ...

    async def sessions_behind(
        self, projection: str, generation: int, *, idle_s: float, limit: int, within_s: float
    ) -> list[Behind]:
        """Sessions committed within `within_s` s and idle for `idle_s` s that the generation
        has not applied up to their head (target)."""
        ...

    async def sessions_behind_range(
        self, projection: str, generation: int, *, idle_s: float, limit: int, after: Key, upto: Key
    ) -> list[Behind]:
        """Like sessions_behind, for the sessions with after < key <= upto, however old."""
        ...

    async def sweep_end(self, after: Key, page: int) -> Key | None:
        """The key of the last of `page` sessions after `after`; None past the last session."""
        ...

    async def read_state(self, projection: str, tenant: str, session: str) -> StoredState | None:
        """The session's state in the live generation; None if it has none yet."""
        ...

    def notifications(self, on_notify: Callable[[str], None]) -> Subscription:
        """Calls on_notify(APPLIED or SWITCHED) for every change of the models, once started."""
        ...

    def parked(self) -> ParkedStore:
        """The sessions parked and the records dead beside these states (the same store)."""
        ...


def _behind(rows: Sequence[asyncpg.Record], target: str) -> list[Behind]:
    return [Behind(r["tenant_id"], r["session_id"], r["applied"], r[target]) for r in rows]


class _Statements:
    """Statements that run the same on the pool (one each) and inside a transaction."""

    def __init__(self, db: asyncpg.Pool | asyncpg.Connection) -> None:
        self._db = db

    async def ledger_range(
        self, tenant: str, session: str, after: int, upto: int = _LEDGER_END
    ) -> list[Event]:
        async with translated("read ledger range"):
            rows = await self._db.fetch(query("ledger_range"), tenant, session, after, upto)
        return [
            Event.trusted(tenant, session, r["seq"], r["kind"], r["payload"], r["committed_at"])
            for r in rows
        ]

    async def live_generations(self) -> dict[str, int]:
        async with translated("read live generations"):
            rows = await self._db.fetch(query("projection_live_generations"))
        return {r["projection"]: r["generation"] for r in rows}


class PostgresProjectionTransaction(_Statements, TranscriptRowStatements):
    """Implements ProjectionTransaction (and TranscriptRowsTransaction) on the connection that
    holds the transaction."""

    async def lock_states(
        self, projection: str, generation: int, keys: Sequence[Key]
    ) -> dict[Key, StoredState]:
        async with translated("lock projection states"):
            rows = await self._db.fetch(
                query("projection_lock_states"),
                projection,
                generation,
                [k[0] for k in keys],
                [k[1] for k in keys],
            )
        return {
            (r["tenant_id"], r["session_id"]): StoredState(r["last_seq"], r["state"]) for r in rows
        }

    async def write_states(
        self, projection: str, generation: int, states: Mapping[Key, StoredState]
    ) -> None:
        if not states:
            return
        keys = list(states)
        async with translated("write projection states"):
            await self._db.execute(
                query("projection_upsert_states"),
                projection,
                generation,
                [k[0] for k in keys],
                [k[1] for k in keys],
                [states[k].last_seq for k in keys],
                [states[k].state for k in keys],
            )

    async def store_offsets(
        self, projection: str, generation: int, topic: str, next_offsets: Mapping[int, int]
    ) -> None:
        if not next_offsets:
            return
        partitions = sorted(next_offsets)
        async with translated("store projection offsets"):
            await self._db.execute(
                query("projection_store_offsets"),
                projection,
                generation,
                topic,
                partitions,
                [next_offsets[p] for p in partitions],
            )

    async def lock_generations(self, projection: str) -> dict[int, str]:
        async with translated("lock projection generations"):
            rows = await self._db.fetch(query("projection_lock_generations"), projection)
        return {r["generation"]: r["status"] for r in rows}

    async def behind_generation(
        self, projection: str, old: int | None, new: int, *, to_ledger: bool
    ) -> list[Behind]:
        async with translated("find sessions behind a generation"):
            rows = await self._db.fetch(
                query("projection_behind_generation"), projection, old or 0, new, to_ledger
            )
        return _behind(rows, "target")

    async def switch(self, projection: str, generation: int) -> None:
        async with translated("switch projection generation"):
            await self._db.execute(query("projection_switch"), projection, generation)

    async def notify(self, what: str) -> None:
        async with translated("notify projection readers"):
            await self._db.execute(query("projection_notify"), what)


class PostgresProjectionStore(_Statements):
    """Implements ProjectionStore on an asyncpg pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool)
        self._pool = pool
        self._parked = PostgresParked(pool)

    def parked(self) -> ParkedStore:
        return self._parked

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[ProjectionTransaction]:
        async with translated("begin projection transaction"):
            conn = await self._pool.acquire()
            tx = conn.transaction()
            try:
                await tx.start()
            except BaseException:
                await self._pool.release(conn)
                raise
        try:
            yield PostgresProjectionTransaction(conn)
        except BaseException:
            # What the block raised (a broker error from a frame sink, say) leaves as it is. The
            # connection is dropped rather than rolled back: the server rolls back when it goes,
            # and a rollback on a connection that just failed could only fail again.
            conn.terminate()
            raise
        async with translated("commit projection transaction"):
            try:
                await tx.commit()
            finally:
                await self._pool.release(conn)

    async def offsets(self, projection: str, generation: int, topic: str) -> dict[int, int]:
        async with translated("read projection offsets"):
            rows = await self._pool.fetch(
                query("projection_offsets"), projection, generation, topic
            )
        return {r["partition"]: r["next_offset"] for r in rows}

    async def new_generation(self, projection: str) -> int:
        async with translated("create projection generation"):
            generation = await self._pool.fetchval(query("projection_new_generation"), projection)
        return int(generation)

    async def generations(self) -> list[Generation]:
        async with translated("list projection generations"):
            rows = await self._pool.fetch(query("projection_generations"))
        return [
            Generation(
                r["projection"], r["generation"], r["status"], int(r["sessions"]), r["live_at"]
            )
            for r in rows
        ]

    async def sessions_behind_ledger(self, projection: str, generation: int) -> int:
        async with translated("count sessions behind the ledger"):
            count = await self._pool.fetchval(
                query("projection_sessions_behind_ledger"), projection, generation
            )
        return int(count)

    async def sessions_behind(
        self, projection: str, generation: int, *, idle_s: float, limit: int, within_s: float
    ) -> list[Behind]:
        async with translated("find sessions behind the ledger"):
            rows = await self._pool.fetch(
                query("projection_behind"), projection, generation, idle_s, limit, within_s
            )
        return _behind(rows, "head")

    async def sessions_behind_range(
        self, projection: str, generation: int, *, idle_s: float, limit: int, after: Key, upto: Key
    ) -> list[Behind]:
        async with translated("sweep sessions behind the ledger"):
            rows = await self._pool.fetch(
                query("projection_behind_range"),
                projection,
                generation,
                idle_s,
                limit,
                *after,
                *upto,
            )
        return _behind(rows, "head")

    async def sweep_end(self, after: Key, page: int) -> Key | None:
        async with translated("page the reconcile sweep"):
            row = await self._pool.fetchrow(query("projection_sweep_page"), *after, page)
        return None if row is None else (row["tenant_id"], row["session_id"])

    async def read_state(self, projection: str, tenant: str, session: str) -> StoredState | None:
        if projection == TRANSCRIPT:  # stored as rows (projection_rows), assembled here
            found = (await read_transcripts(self._pool, projection, [(tenant, session)])).values()
            return next((StoredState(*f) for f in found), None)
        async with translated("read model"):
            row = await self._pool.fetchrow(
                query("projection_read_state"), projection, tenant, session
            )
        return None if row is None else StoredState(int(row["last_seq"]), row["state"])

    def notifications(self, on_notify: Callable[[str], None]) -> Subscription:
        return PostgresListener(self._pool, PROJECTIONS_CHANNEL, on_notify)
