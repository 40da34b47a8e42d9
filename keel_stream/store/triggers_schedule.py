"""The scheduler's side of the triggers: claims under a lease, planning transactions (the
firing recorded, the schedule advanced and the trigger.before rows written together), and
outcomes recorded once with their trigger.after rows."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import asyncpg

from keel_stream.store.driver_errors import translated
from keel_stream.store.hooks import NewDelivery, Subscription, delivery_columns, subscription_of
from keel_stream.store.sqlfiles import query
from keel_stream.store.triggers import FiringRow, TriggerRow, firing_of, trigger_of

__all__ = [
    "NewFiring",
    "Outcome",
    "PlanTransaction",
    "PostgresPlanTransaction",
    "PostgresTriggerScheduleStore",
    "TriggerScheduleStore",
]


@dataclass(frozen=True, slots=True)
class NewFiring:
    trigger_id: str
    tenant: str
    key: str
    nominal_at: datetime
    actual_at: datetime
    decision: str
    reason: str
    delivery: str | None
    session: str
    message: str
    detail: dict[str, Any]
    outcome: str | None
    planned_by: str


@dataclass(frozen=True, slots=True)
class Outcome:
    outcome: str
    seq: int | None = None
    created: bool | None = None
    error: str | None = None


class PlanTransaction(Protocol):
    """The statements of one planning transaction (the trigger row locked)."""

    trigger: TriggerRow | None
    """None when the lease lapsed (or the trigger is gone): plan nothing."""
    now: datetime

    async def run_status(self, tenant: str, session: str) -> str | None: ...

    async def has_buffered(self, trigger_id: str) -> bool: ...

    async def insert_firing(self, new: NewFiring) -> FiringRow | None:
        """The recorded firing, or None when its key was recorded before."""
        ...

    async def firing_by_key(self, trigger_id: str, key: str) -> FiringRow | None: ...

    async def advance(
        self,
        trigger_id: str,
        next_nominal_at: datetime | None,
        next_fire_at: datetime | None,
        fires: int,
        state: str,
    ) -> None: ...

    async def subscriptions(self, tenant: str) -> list[Subscription]: ...

    async def insert_deliveries(self, rows: Sequence[NewDelivery]) -> None: ...


class PostgresPlanTransaction:
    """The statements of one planning transaction (the trigger row locked)."""

    def __init__(self, conn: asyncpg.Connection, trigger: TriggerRow | None, now: datetime) -> None:
        self._conn = conn
        self.trigger = trigger
        """None when the lease lapsed (or the trigger is gone): plan nothing."""
        self.now = now

    async def run_status(self, tenant: str, session: str) -> str | None:
        row = await self._conn.fetchrow(query("run_of_session"), tenant, session)
        return None if row is None else str(row["status"])

    async def has_buffered(self, trigger_id: str) -> bool:
        return await self._conn.fetchval(query("trigger_open_buffer"), trigger_id) is not None

    async def insert_firing(self, new: NewFiring) -> FiringRow | None:
        """The recorded firing, or None when its key was recorded before."""
        row = await self._conn.fetchrow(
            query("trigger_firing_insert"),
            new.trigger_id,
            new.tenant,
            new.key,
            new.nominal_at,
            new.actual_at,
            new.decision,
            new.reason,
            new.delivery,
            new.session,
            new.message,
            new.detail,
            new.outcome,
            new.planned_by,
        )
        return None if row is None else firing_of(row)

    async def firing_by_key(self, trigger_id: str, key: str) -> FiringRow | None:
        row = await self._conn.fetchrow(query("trigger_firing_by_key"), trigger_id, key)
        return None if row is None else firing_of(row)

    async def advance(
        self,
        trigger_id: str,
        next_nominal_at: datetime | None,
        next_fire_at: datetime | None,
        fires: int,
        state: str,
    ) -> None:
        await self._conn.execute(
            query("trigger_advance"), trigger_id, next_nominal_at, next_fire_at, fires, state
        )

    async def subscriptions(self, tenant: str) -> list[Subscription]:
        rows = await self._conn.fetch(query("hook_active_for_tenants"), [tenant])
        return [subscription_of(row) for row in rows]

    async def insert_deliveries(self, rows: Sequence[NewDelivery]) -> None:
        if rows:
            await self._conn.execute(query("hook_insert_deliveries"), *delivery_columns(rows))


class TriggerScheduleStore(Protocol):
    """The scheduler's side of the triggers: due claims, plans and firing outcomes."""

    async def claim(self, token: str, lease_s: float, limit: int) -> list[str]:
        """Up to `limit` triggers with work due, leased to `token` for lease_s."""
        ...

    async def release(self, trigger_id: str, token: str) -> None: ...

    def plan(
        self, trigger_id: str, token: str | None
    ) -> AbstractAsyncContextManager[PlanTransaction]:
        """A transaction holding the trigger row: under the lease `token`, or (None) locked
        as an inbound webhook locks it. Commits when the block ends without an error."""
        ...

    async def open_firings(self, trigger_id: str) -> list[FiringRow]: ...

    async def run_status(self, tenant: str, session: str) -> str | None: ...

    async def request_cancel(self, tenant: str, session: str) -> bool:
        """The API's cancel (keel_stream.store.runs): False when no attempt is running."""
        ...

    def finish(
        self, firing_id: int, outcome: Outcome
    ) -> AbstractAsyncContextManager[tuple[PlanTransaction, FiringRow | None]]:
        """Record the outcome (first writer wins: None when it was recorded already) in a
        transaction the block adds its trigger.after rows to."""
        ...


class PostgresTriggerScheduleStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def claim(self, token: str, lease_s: float, limit: int) -> list[str]:
        """Up to `limit` triggers with work due, leased to `token` for lease_s."""
        async with translated("claim triggers"):
            rows = await self._pool.fetch(query("trigger_claim"), token, lease_s, limit)
        return [row["trigger_id"] for row in rows]

    async def release(self, trigger_id: str, token: str) -> None:
        async with translated("release trigger"):
            await self._pool.execute(query("trigger_release"), trigger_id, token)

    @asynccontextmanager
    async def plan(self, trigger_id: str, token: str | None) -> AsyncIterator[PlanTransaction]:
        """A transaction holding the trigger row: under the lease `token`, or (None) locked
        as an inbound webhook locks it. Commits when the block ends without an error."""
        async with (
            translated("plan trigger firing"),
            self._pool.acquire() as conn,
            conn.transaction(),
        ):
            if token is None:
                row = await conn.fetchrow(query("trigger_lock"), trigger_id)
            else:
                row = await conn.fetchrow(query("trigger_lock_leased"), trigger_id, token)
            now = await conn.fetchval(query("trigger_now")) if row is None else row["now"]
            yield PostgresPlanTransaction(conn, None if row is None else trigger_of(row), now)

    async def open_firings(self, trigger_id: str) -> list[FiringRow]:
        async with translated("read open firings"):
            rows = await self._pool.fetch(query("trigger_firings_open"), trigger_id)
        return [firing_of(row) for row in rows]

    async def run_status(self, tenant: str, session: str) -> str | None:
        async with translated("read run status"):
            row = await self._pool.fetchrow(query("run_of_session"), tenant, session)
        return None if row is None else str(row["status"])

    async def request_cancel(self, tenant: str, session: str) -> bool:
        """The API's cancel (keel_stream.store.runs): False when no attempt is running."""
        async with translated("cancel run"):
            return await self._pool.fetchrow(query("request_cancel"), tenant, session) is not None

    @asynccontextmanager
    async def finish(
        self, firing_id: int, outcome: Outcome
    ) -> AsyncIterator[tuple[PlanTransaction, FiringRow | None]]:
        """Record the outcome (first writer wins: None when it was recorded already) in a
        transaction the block adds its trigger.after rows to."""
        async with translated("finish firing"), self._pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(
                query("trigger_firing_finish"),
                firing_id,
                outcome.outcome,
                outcome.seq,
                outcome.created,
                outcome.error,
            )
            now = await conn.fetchval(query("trigger_now"))
            yield PostgresPlanTransaction(conn, None, now), None if row is None else firing_of(row)
