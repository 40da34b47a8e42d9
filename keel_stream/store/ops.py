"""What the operations page reads from the database: the outbox backlog, the workers and the
tenant's leases."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Protocol

import asyncpg

from keel_stream.store.driver_errors import translated
from keel_stream.store.outbox import Backlog
from keel_stream.store.sqlfiles import query

__all__ = ["LeaseRow", "OpsReader", "PostgresOpsReader", "WorkerRow"]

ROWS_SHOWN: Final = 100


@dataclass(frozen=True, slots=True)
class LeaseRow:
    session_id: str
    owner: str | None
    epoch: int
    attempts: int
    expires_at: datetime | None
    heartbeat_at: datetime | None


@dataclass(frozen=True, slots=True)
class WorkerRow:
    owner: str
    leases: int
    heartbeat_at: datetime | None


class OpsReader(Protocol):
    """The operator's reads: the outbox backlog, run leases, workers."""

    async def backlog(self) -> Backlog:
        """The whole outbox (every shard): events not yet published and the oldest's age."""
        ...

    async def leases(self, tenant: str) -> list[LeaseRow]: ...

    async def workers(self) -> list[WorkerRow]: ...


class PostgresOpsReader:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def backlog(self) -> Backlog:
        """The whole outbox (every shard): events not yet published and the oldest's age."""
        async with translated("read outbox backlog"):
            row = await self._pool.fetchrow(query("relay_backlog"), 1, 0)
        if row is None:
            return Backlog(events=0, oldest_s=0.0)
        return Backlog(events=int(row["events"]), oldest_s=float(row["oldest_s"]))

    async def leases(self, tenant: str) -> list[LeaseRow]:
        async with translated("read the tenant's leases"):
            rows = await self._pool.fetch(query("ops_leases"), tenant, ROWS_SHOWN)
        return [
            LeaseRow(
                session_id=r["session_id"],
                owner=r["lease_owner"],
                epoch=int(r["lease_epoch"]),
                attempts=int(r["attempts"]),
                expires_at=r["lease_expires_at"],
                heartbeat_at=r["heartbeat_at"],
            )
            for r in rows
        ]

    async def workers(self) -> list[WorkerRow]:
        async with translated("read the workers holding leases"):
            rows = await self._pool.fetch(query("ops_workers"), ROWS_SHOWN)
        return [WorkerRow(r["owner"], int(r["leases"]), r["heartbeat_at"]) for r in rows]
