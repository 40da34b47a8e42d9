"""The relay's side of the outbox: election, batches, acknowledgement, backlog."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import asyncpg

from keel_stream.relay.publisher import OutboxRow
from keel_stream.store.sqlfiles import query

__all__ = ["RELAY_LOCK_CLASS", "Backlog", "Shard"]

RELAY_LOCK_CLASS: Final = 0x6B656C72  # "kelr": the advisory-lock class of relay shards


@dataclass(frozen=True, slots=True)
class Backlog:
    events: int
    oldest_s: float


@dataclass(frozen=True, slots=True)
class Shard:
    """One outbox shard (tenant hash modulo shards), read over the relay's own connection."""

    index: int = 0
    count: int = 1

    async def try_lead(self, conn: asyncpg.Connection) -> bool:
        return bool(await conn.fetchval(query("relay_try_lock"), RELAY_LOCK_CLASS, self.index))

    async def fetch(self, conn: asyncpg.Connection, limit: int) -> list[OutboxRow]:
        rows = await conn.fetch(query("relay_fetch_batch"), limit, self.count, self.index)
        return [
            OutboxRow(
                id=r["id"],
                tenant=r["tenant_id"],
                session=r["session_id"],
                seq=r["seq"],
                kind=r["kind"],
                payload=r["payload"],
                committed_at=r["committed_at"],
            )
            for r in rows
        ]

    async def acknowledge(self, conn: asyncpg.Connection, ids: list[int]) -> None:
        await conn.execute(query("relay_delete_published"), ids)

    async def backlog(self, conn: asyncpg.Connection) -> Backlog:
        row = await conn.fetchrow(query("relay_backlog"), self.count, self.index)
        assert row is not None
        return Backlog(events=int(row["events"]), oldest_s=float(row["oldest_s"]))
