"""The outbox, as the relay and the republish path see it.

A relay serves one shard (tenant hash modulo shards) over a connection of its own: the shard's
advisory lock is taken on that connection and lives and dies with it, so a standby takes over
once the active relay's connection ends, whatever ended it. Rows leave the outbox only once the
broker acknowledged them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol, runtime_checkable

import asyncpg

from keel_stream.errors import StoreError
from keel_stream.store.connect import connect
from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query

__all__ = [
    "COMMITS_CHANNEL",
    "RELAY_LOCK_CLASS",
    "Backlog",
    "Outbox",
    "OutboxRow",
    "PipelinedShard",
    "PostgresOutbox",
    "RepublishReport",
    "Shard",
    "ShardConnection",
]

RELAY_LOCK_CLASS: Final = 0x6B656C72  # "kelr": the advisory-lock class of relay shards
COMMITS_CHANNEL: Final = "keel_commits"
_CLOSE_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class Shard:
    """One outbox shard: the tenants whose hash modulo `count` is `index`."""

    index: int = 0
    count: int = 1


@dataclass(frozen=True, slots=True)
class OutboxRow:
    """One unpublished event, joined from the outbox and the ledger."""

    id: int
    tenant: str
    session: str
    seq: int
    kind: str
    payload: dict[str, Any]
    committed_at: datetime
    metadata: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Backlog:
    events: int
    oldest_s: float


@dataclass(frozen=True, slots=True)
class RepublishReport:
    sessions: int
    events: int


class ShardConnection(Protocol):
    """One shard of the outbox over a connection held for as long as the block runs."""

    async def try_lead(self) -> bool:
        """Take the shard's lock on this connection; False while another relay holds it."""
        ...

    async def fetch(self, limit: int) -> list[OutboxRow]:
        """The shard's oldest unpublished events, in outbox order (seq order per session)."""
        ...

    async def acknowledge(self, ids: Sequence[int]) -> None:
        """Delete rows the broker acknowledged."""
        ...

    async def backlog(self) -> Backlog:
        """How many of the shard's events wait, and the age of the oldest."""
        ...

    async def commit_wake_ups(self) -> asyncio.Event:
        """An event set on every commit's NOTIFY, from now until the connection ends."""
        ...


@runtime_checkable
class PipelinedShard(Protocol):
    """A shard connection that fetches past the rows a relay has in flight (so the relay can
    fetch and send its next batch while the previous ones await their acknowledgements), and
    deletes acknowledged rows beside it (so a fetch never waits for a delete's commit)."""

    async def fetch_excluding(
        self, limit: int, excluding: Sequence[int], deleting: Sequence[int] = ()
    ) -> list[OutboxRow]:
        """As ShardConnection.fetch, without the rows of `excluding` (outbox ids), after
        deleting the rows of `deleting` (acknowledged, and in `excluding` too) in the same
        statement."""
        ...

    async def acknowledge_aside(self, ids: Sequence[int]) -> None:
        """As ShardConnection.acknowledge, over a second connection of the shard's (opened on
        first use, closed with the shard's): it may run while this one fetches."""
        ...


class Outbox(Protocol):
    """What the relay and the republish path ask of the outbox."""

    def shard(self, shard: Shard) -> AbstractAsyncContextManager[ShardConnection]:
        """A connection of its own for one shard; closing it frees the shard's lock."""
        ...

    async def republish(
        self, *, tenant: str | None = None, session: str | None = None, after_seq: int = 0
    ) -> RepublishReport:
        """Enqueue the ledger's events (all, a tenant's, or one session's) with seq > after_seq:
        re-seeding keel.events.v1 for a broker that lost data. Session by session, under each
        session's row lock, so their outbox ids follow seq; the relay publishes them as usual,
        and consumers de-duplicate by (tenant, session, seq), so republishing what the topic
        still holds is harmless."""
        ...


class _Connections(Protocol):
    async def open(self) -> asyncpg.Connection: ...
    async def close(self, conn: asyncpg.Connection) -> None: ...


class _Pooled:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def open(self) -> asyncpg.Connection:
        return await self._pool.acquire()

    async def close(self, conn: asyncpg.Connection) -> None:
        await self._pool.release(conn)  # the reset frees the shard's lock and UNLISTENs


class _Dedicated:
    def __init__(self, dsn: str, application_name: str) -> None:
        self._dsn = dsn
        self._name = application_name

    async def open(self) -> asyncpg.Connection:
        return await connect(self._dsn, application_name=self._name)

    async def close(self, conn: asyncpg.Connection) -> None:
        await conn.close(timeout=_CLOSE_TIMEOUT_S)


def _rows(records: list[asyncpg.Record]) -> list[OutboxRow]:
    return [
        OutboxRow(
            id=r["id"],
            tenant=r["tenant_id"],
            session=r["session_id"],
            seq=r["seq"],
            kind=r["kind"],
            payload=r["payload"],
            committed_at=r["committed_at"],
            metadata=r["metadata"],
        )
        for r in records
    ]


class _PostgresShard:
    def __init__(self, conn: asyncpg.Connection, shard: Shard, connections: _Connections) -> None:
        self._conn = conn
        self._shard = shard
        self._connections = connections
        self._aside: asyncpg.Connection | None = None

    async def try_lead(self) -> bool:
        async with translated("take the relay lock"):
            held = await self._conn.fetchval(
                query("relay_try_lock"), RELAY_LOCK_CLASS, self._shard.index
            )
        return bool(held)

    async def fetch(self, limit: int) -> list[OutboxRow]:
        return await self.fetch_excluding(limit, ())

    async def fetch_excluding(
        self, limit: int, excluding: Sequence[int], deleting: Sequence[int] = ()
    ) -> list[OutboxRow]:
        async with translated("fetch outbox batch"):
            rows = await self._conn.fetch(
                query("relay_fetch_batch_excluding"),
                limit,
                self._shard.count,
                self._shard.index,
                list(excluding),
                list(deleting),
            )
        return _rows(rows)

    async def acknowledge_aside(self, ids: Sequence[int]) -> None:
        if self._aside is None:
            async with translated("delete published outbox rows: connect"):
                self._aside = await self._connections.open()
        async with translated("delete published outbox rows"):
            await self._aside.execute(query("relay_delete_published"), list(ids))

    async def close_aside(self, failed: bool) -> None:
        """Close the second connection, if it was opened (dropped when the shard's failed)."""
        aside, self._aside = self._aside, None
        if aside is None:
            return
        if failed or aside.is_in_transaction():
            aside.terminate()
            return
        async with translated("delete published outbox rows: close"):
            await self._connections.close(aside)

    async def acknowledge(self, ids: Sequence[int]) -> None:
        async with translated("delete published outbox rows"):
            await self._conn.execute(query("relay_delete_published"), list(ids))

    async def backlog(self) -> Backlog:
        async with translated("read outbox backlog"):
            row = await self._conn.fetchrow(
                query("relay_backlog"), self._shard.count, self._shard.index
            )
        if row is None:
            raise StoreError("read outbox backlog: the query returned no row")
        return Backlog(events=int(row["events"]), oldest_s=float(row["oldest_s"]))

    async def commit_wake_ups(self) -> asyncio.Event:
        wake = asyncio.Event()
        async with translated("listen for commits"):
            await self._conn.add_listener(COMMITS_CHANNEL, lambda *_: wake.set())
        return wake


class PostgresOutbox:
    """Implements Outbox on a pool, or (`connecting`) on connections opened from a DSN."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._connections: _Connections = _Pooled(pool)

    @classmethod
    def connecting(cls, dsn: str, *, application_name: str) -> PostgresOutbox:
        """Every connection is a new one named `application_name` (pg_stat_activity then tells
        which relay holds a shard)."""
        outbox = cls.__new__(cls)
        outbox._connections = _Dedicated(dsn, application_name)
        return outbox

    @asynccontextmanager
    async def _held(self, action: str) -> AsyncIterator[asyncpg.Connection]:
        """A connection for the block. Only opening and closing it are translated here: what
        the block raises (a broker error, say) leaves as it is."""
        async with translated(f"{action}: connect"):
            conn = await self._connections.open()
        try:
            yield conn
        except BaseException:
            # Dropped, not closed: its state is unknown, and a graceful close of a connection
            # that failed could only fail again and hide the error on its way out.
            conn.terminate()
            raise
        async with translated(f"{action}: close"):
            await self._connections.close(conn)

    @asynccontextmanager
    async def shard(self, shard: Shard) -> AsyncIterator[ShardConnection]:
        async with self._held(f"relay shard {shard.index}") as conn:
            connection = _PostgresShard(conn, shard, self._connections)
            try:
                yield connection
            except BaseException:
                await connection.close_aside(failed=True)
                raise
            await connection.close_aside(failed=False)

    async def republish(
        self, *, tenant: str | None = None, session: str | None = None, after_seq: int = 0
    ) -> RepublishReport:
        # Session by session, each under its row lock, so the new outbox ids follow seq.
        events = 0
        async with self._held("republish") as conn, translated("republish"):
            targets = await conn.fetch(query("republish_sessions"), tenant, session)
            for target in targets:
                async with conn.transaction():
                    events += await conn.fetchval(
                        query("republish_session"),
                        target["tenant_id"],
                        target["session_id"],
                        after_seq,
                    )
        return RepublishReport(sessions=len(targets), events=events)
