"""Decision deadlines: when the expiry sweeper should look at an open decision (an index; the
log is the truth), on PostgreSQL or in memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Protocol

import asyncpg

from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query

__all__ = ["Deadline", "Deadlines", "MemoryDeadlines", "PostgresDeadlines"]


@dataclass(frozen=True, slots=True)
class Deadline:
    tenant: str
    session: str
    decision: str
    expires_at: datetime
    on_expire: str


class Deadlines(Protocol):
    async def sync(self, tenant: str, session: str, open_now: Sequence[Deadline]) -> None:
        """The session's open decisions are exactly `open_now`: record the new ones (a deadline
        already recorded is left as it is), close the others."""
        ...

    async def claim_due(
        self, now: datetime, owner: str, lease_s: float, limit: int
    ) -> list[Deadline]:
        """Deadlines at or before `now`, not closed, leased to `owner` for `lease_s`."""
        ...

    async def close(self, tenant: str, session: str, decision: str) -> None: ...


class PostgresDeadlines:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def sync(self, tenant: str, session: str, open_now: Sequence[Deadline]) -> None:
        async with translated("record decision deadlines"):
            await self._pool.execute(
                query("deadline_sync"), tenant, session,
                [d.decision for d in open_now], [d.expires_at for d in open_now],
                [d.on_expire for d in open_now],
            )  # fmt: skip

    async def claim_due(
        self, now: datetime, owner: str, lease_s: float, limit: int
    ) -> list[Deadline]:
        async with translated("claim due decision deadlines"):
            rows = await self._pool.fetch(query("deadline_claim"), now, owner, lease_s, limit)
        return [
            Deadline(r["tenant_id"], r["session_id"], r["decision_id"], r["expires_at"],
                     r["on_expire"])
            for r in rows
        ]  # fmt: skip

    async def close(self, tenant: str, session: str, decision: str) -> None:
        async with translated("close a decision deadline"):
            await self._pool.execute(query("deadline_close"), tenant, session, decision)


@dataclass(slots=True)
class _Row:
    deadline: Deadline
    closed: bool = False
    owner: str | None = None
    until: datetime | None = None


class MemoryDeadlines:
    """The same rules in memory (leases by the sweeper's clock)."""

    def __init__(self) -> None:
        self._rows: dict[tuple[str, str, str], _Row] = {}

    async def sync(self, tenant: str, session: str, open_now: Sequence[Deadline]) -> None:
        keep = {d.decision for d in open_now}
        for (t, s, decision), row in self._rows.items():
            if (t, s) == (tenant, session) and decision not in keep:
                row.closed, row.owner, row.until = True, None, None
        for d in open_now:
            self._rows.setdefault((tenant, session, d.decision), _Row(d))

    async def claim_due(
        self, now: datetime, owner: str, lease_s: float, limit: int
    ) -> list[Deadline]:
        due = sorted(
            (r for r in self._rows.values() if not r.closed and r.deadline.expires_at <= now
             and (r.until is None or r.until < now)),
            key=lambda r: r.deadline.expires_at,
        )[:limit]  # fmt: skip
        for row in due:
            row.owner, row.until = owner, now + timedelta(seconds=lease_s)
        return [replace(r.deadline) for r in due]

    async def close(self, tenant: str, session: str, decision: str) -> None:
        row = self._rows.get((tenant, session, decision))
        if row is not None:
            row.closed, row.owner, row.until = True, None, None
