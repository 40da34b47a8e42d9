"""Triggers and their firings log (docs/triggers.md): what the API reads and writes.

A webhook trigger's secret leaves the store only with the row the creation returns and the
row an inbound delivery is verified against (TriggerRow.secret); the API never shows it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import asyncpg

from keel_stream.errors import TenantNotFound, TriggerLimitReached, TriggerNotFound
from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query

__all__ = [
    "FiringRow",
    "NewTrigger",
    "PostgresTriggerStore",
    "TriggerRow",
    "TriggerStore",
    "firing_of",
    "trigger_of",
]


@dataclass(frozen=True, slots=True)
class TriggerRow:
    id: str
    tenant: str
    kind: str
    spec: Mapping[str, Any]
    secret: str | None
    state: str
    next_nominal_at: datetime | None
    next_fire_at: datetime | None
    fires: int
    created_at: datetime


def trigger_of(row: Mapping[str, Any]) -> TriggerRow:
    return TriggerRow(
        id=row["trigger_id"],
        tenant=row["tenant_id"],
        kind=row["kind"],
        spec=row["spec"],
        secret=row["secret"],
        state=row["state"],
        next_nominal_at=row["next_nominal_at"],
        next_fire_at=row["next_fire_at"],
        fires=row["fires"],
        created_at=row["created_at"],
    )


@dataclass(frozen=True, slots=True)
class FiringRow:
    id: int
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
    detail: Mapping[str, Any]
    outcome: str | None
    seq: int | None
    created: bool | None
    error: str | None
    planned_by: str
    recorded_at: datetime
    finished_at: datetime | None


def firing_of(row: Mapping[str, Any]) -> FiringRow:
    return FiringRow(
        id=row["firing_id"],
        trigger_id=row["trigger_id"],
        tenant=row["tenant_id"],
        key=row["fire_key"],
        nominal_at=row["nominal_at"],
        actual_at=row["actual_at"],
        decision=row["decision"],
        reason=row["reason"],
        delivery=row["delivery"],
        session=row["session_id"],
        message=row["message"],
        detail=row["detail"],
        outcome=row["outcome"],
        seq=row["seq"],
        created=row["created"],
        error=row["error"],
        planned_by=row["planned_by"],
        recorded_at=row["recorded_at"],
        finished_at=row["finished_at"],
    )


@dataclass(frozen=True, slots=True)
class NewTrigger:
    id: str
    tenant: str
    kind: str
    spec: Mapping[str, Any]
    secret: str | None
    next_nominal_at: datetime | None
    next_fire_at: datetime | None


class TriggerStore(Protocol):
    """The tenants' triggers and their firings, as the API sees them."""

    async def create(self, new: NewTrigger) -> TriggerRow:
        """A new active trigger; TriggerLimitReached over the tenant's bound."""
        ...

    async def get(self, tenant: str, trigger_id: str) -> TriggerRow: ...

    async def get_any(self, trigger_id: str) -> TriggerRow:
        """A trigger of any tenant (an inbound webhook carries no API key)."""
        ...

    async def list_triggers(self, tenant: str, after: str, limit: int) -> list[TriggerRow]: ...

    async def delete(self, tenant: str, trigger_id: str) -> None: ...

    async def set_state(
        self,
        tenant: str,
        trigger_id: str,
        state: str,
        next_nominal_at: datetime | None,
        next_fire_at: datetime | None,
    ) -> TriggerRow | None:
        """Pause or resume; None when the trigger is completed (it stays so)."""
        ...

    async def firings(self, trigger_id: str, cursor: int, limit: int) -> list[FiringRow]:
        """Newest first, before the cursor (the last id of the previous page; 0: the first)."""
        ...

    async def firing(self, trigger_id: str, key: str) -> FiringRow | None:
        """The firing recorded for a key (a nominal time or a webhook's delivery id)."""
        ...


class PostgresTriggerStore:
    """The PostgreSQL repository of triggers and their firings."""

    def __init__(self, pool: asyncpg.Pool, *, max_per_tenant: int = 100) -> None:
        self._pool = pool
        self.max_per_tenant = max_per_tenant

    async def create(self, new: NewTrigger) -> TriggerRow:
        """A new active trigger; TriggerLimitReached over the tenant's bound."""
        async with translated("create trigger"), self._pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(query("trigger_lock_tenant"), new.tenant) is None:
                raise TenantNotFound(f"tenant {new.tenant!r} does not exist")
            if await conn.fetchval(query("trigger_count"), new.tenant) >= self.max_per_tenant:
                raise TriggerLimitReached(f"a tenant has at most {self.max_per_tenant} triggers")
            row = await conn.fetchrow(
                query("trigger_insert"),
                new.id,
                new.tenant,
                new.kind,
                dict(new.spec),
                new.secret,
                new.next_nominal_at,
                new.next_fire_at,
            )
        assert row is not None
        return trigger_of(row)

    async def get(self, tenant: str, trigger_id: str) -> TriggerRow:
        async with translated("read trigger"):
            row = await self._pool.fetchrow(query("trigger_get"), tenant, trigger_id)
        if row is None:
            raise TriggerNotFound(f"trigger {trigger_id!r} not found")
        return trigger_of(row)

    async def get_any(self, trigger_id: str) -> TriggerRow:
        """A trigger of any tenant (an inbound webhook carries no API key)."""
        async with translated("read trigger"):
            row = await self._pool.fetchrow(query("trigger_get_any"), trigger_id)
        if row is None:
            raise TriggerNotFound(f"trigger {trigger_id!r} not found")
        return trigger_of(row)

    async def list_triggers(self, tenant: str, after: str, limit: int) -> list[TriggerRow]:
        async with translated("list triggers"):
            rows = await self._pool.fetch(query("trigger_list"), tenant, after, limit)
        return [trigger_of(row) for row in rows]

    async def delete(self, tenant: str, trigger_id: str) -> None:
        async with translated("delete trigger"):
            found = await self._pool.fetchval(query("trigger_delete"), tenant, trigger_id)
        if found is None:
            raise TriggerNotFound(f"trigger {trigger_id!r} not found")

    async def set_state(
        self,
        tenant: str,
        trigger_id: str,
        state: str,
        next_nominal_at: datetime | None,
        next_fire_at: datetime | None,
    ) -> TriggerRow | None:
        """Pause or resume; None when the trigger is completed (it stays so)."""
        async with translated("set trigger state"):
            row = await self._pool.fetchrow(
                query("trigger_set_state"),
                tenant,
                trigger_id,
                state,
                next_nominal_at,
                next_fire_at,
            )
        return None if row is None else trigger_of(row)

    async def firings(self, trigger_id: str, cursor: int, limit: int) -> list[FiringRow]:
        """Newest first, before the cursor (the last id of the previous page; 0: the first)."""
        async with translated("list trigger firings"):
            rows = await self._pool.fetch(query("trigger_firings_page"), trigger_id, cursor, limit)
        return [firing_of(row) for row in rows]

    async def firing(self, trigger_id: str, key: str) -> FiringRow | None:
        """The firing recorded for a key (a nominal time or a webhook's delivery id)."""
        async with translated("read trigger firing"):
            row = await self._pool.fetchrow(query("trigger_firing_by_key"), trigger_id, key)
        return None if row is None else firing_of(row)
