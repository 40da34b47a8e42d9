"""Hook subscriptions and their deliveries log (docs/hooks.md): what the API reads and writes.

A secret leaves the store only in the answer to `create` and `rotate` (Subscription has no
secret field); senders read secrets with their claims (keel_stream.store.hooks_queue).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

import asyncpg

from keel_stream.errors import DeliveryNotFound, HookLimitReached, HookNotFound, TenantNotFound
from keel_stream.kernel.types import Event
from keel_stream.store.driver_errors import translated
from keel_stream.store.postgres import event_of
from keel_stream.store.sqlfiles import query

__all__ = [
    "Attempt",
    "Delivery",
    "HookStore",
    "NewDelivery",
    "PostgresHookStore",
    "Subscription",
    "subscription_of",
]

_ROTATION_GRACE_S: Final = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class Subscription:
    id: str
    tenant: str
    url: str
    events: tuple[str, ...]
    session_ids: tuple[str, ...] | None
    session_prefix: str | None
    state: str
    disabled_reason: str | None
    created_at: datetime
    rotated_at: datetime | None


def subscription_of(row: Mapping[str, Any]) -> Subscription:
    ids = row["session_ids"]
    return Subscription(
        id=row["hook_id"],
        tenant=row["tenant_id"],
        url=row["url"],
        events=tuple(row["events"]),
        session_ids=None if ids is None else tuple(ids),
        session_prefix=row["session_prefix"],
        state=row["state"],
        disabled_reason=row["disabled_reason"],
        created_at=row["created_at"],
        rotated_at=row["rotated_at"],
    )


@dataclass(frozen=True, slots=True)
class NewDelivery:
    """A delivery row to write: one (subscription, hook event)."""

    hook_id: str
    tenant: str
    session: str
    seq: int
    hook: str
    decision_id: str
    webhook_id: str
    body: str


@dataclass(frozen=True, slots=True)
class Attempt:
    attempt: int
    attempted_at: datetime
    status_code: int | None
    error: str | None
    duration_ms: int


@dataclass(frozen=True, slots=True)
class Delivery:
    id: int
    hook_id: str
    session: str
    seq: int
    hook: str
    decision_id: str
    webhook_id: str
    status: str
    attempts: int
    next_attempt_at: datetime
    last_status: int | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    delivered_at: datetime | None


def _delivery(row: Mapping[str, Any]) -> Delivery:
    return Delivery(
        id=row["delivery_id"],
        hook_id=row["hook_id"],
        session=row["session_id"],
        seq=row["seq"],
        hook=row["hook"],
        decision_id=row["decision_id"],
        webhook_id=row["webhook_id"],
        status=row["status"],
        attempts=row["attempts"],
        next_attempt_at=row["next_attempt_at"],
        last_status=row["last_status"],
        last_error=row["last_error"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        delivered_at=row["delivered_at"],
    )


def delivery_columns(rows: Sequence[NewDelivery]) -> list[list[Any]]:
    """The rows as the unnest arrays of hook_insert_deliveries / hook_replay_deliveries."""
    return [
        [r.hook_id for r in rows],
        [r.tenant for r in rows],
        [r.session for r in rows],
        [r.seq for r in rows],
        [r.hook for r in rows],
        [r.decision_id for r in rows],
        [r.webhook_id for r in rows],
        [r.body for r in rows],
    ]


class HookStore(Protocol):
    """The tenants' webhook subscriptions and their deliveries, as the API and replay see them."""

    async def create(
        self,
        tenant: str,
        url: str,
        events: Sequence[str],
        session_ids: Sequence[str] | None,
        session_prefix: str | None,
        secret: str,
    ) -> Subscription:
        """A new active subscription; HookLimitReached over the tenant's bound."""
        ...

    async def list_hooks(self, tenant: str) -> list[Subscription]: ...

    async def get(self, tenant: str, hook_id: str) -> Subscription: ...

    async def delete(self, tenant: str, hook_id: str) -> None: ...

    async def rotate(
        self, tenant: str, hook_id: str, secret: str, grace_s: float = _ROTATION_GRACE_S
    ) -> Subscription:
        """Sign with `secret` from now on, and with the previous one too for grace_s."""
        ...

    async def deliveries(
        self, hook_id: str, status: str | None, cursor: int, limit: int
    ) -> list[Delivery]:
        """Newest first, after the cursor (the last id of the previous page; 0 for the first)."""
        ...

    async def delivery(self, hook_id: str, delivery_id: int) -> tuple[Delivery, list[Attempt]]: ...

    async def redeliver(self, hook_id: str, delivery_id: int) -> Delivery: ...

    async def queue_again(self, rows: Sequence[NewDelivery]) -> None:
        """Write (or reset to pending) the rows of a replay."""
        ...

    async def sessions(
        self, tenant: str, after: str, prefix: str | None, limit: int
    ) -> list[tuple[str, bool]]:
        """The tenant's sessions after a cursor, by id, each with whether it is native."""
        ...

    async def ledger_range(self, tenant: str, session: str, after: int, upto: int) -> list[Event]:
        """The session's committed events with after < seq <= upto, in seq order."""
        ...


class PostgresHookStore:
    """The PostgreSQL repository of subscriptions and deliveries."""

    def __init__(self, pool: asyncpg.Pool, *, max_per_tenant: int = 20) -> None:
        self._pool = pool
        self.max_per_tenant = max_per_tenant

    async def create(
        self,
        tenant: str,
        url: str,
        events: Sequence[str],
        session_ids: Sequence[str] | None,
        session_prefix: str | None,
        secret: str,
    ) -> Subscription:
        """A new active subscription; HookLimitReached over the tenant's bound."""
        hook_id = f"hk_{secrets.token_hex(8)}"
        async with translated("create hook"), self._pool.acquire() as conn, conn.transaction():
            if await conn.fetchval(query("hook_lock_tenant"), tenant) is None:
                raise TenantNotFound(f"tenant {tenant!r} does not exist")
            if await conn.fetchval(query("hook_count"), tenant) >= self.max_per_tenant:
                raise HookLimitReached(
                    f"a tenant has at most {self.max_per_tenant} hook subscriptions"
                )
            row = await conn.fetchrow(
                query("hook_insert"),
                hook_id,
                tenant,
                url,
                list(events),
                None if session_ids is None else list(session_ids),
                session_prefix,
                secret,
            )
        assert row is not None
        return subscription_of(row)

    async def list_hooks(self, tenant: str) -> list[Subscription]:
        async with translated("list hooks"):
            rows = await self._pool.fetch(query("hook_list"), tenant)
        return [subscription_of(row) for row in rows]

    async def get(self, tenant: str, hook_id: str) -> Subscription:
        async with translated("read hook"):
            row = await self._pool.fetchrow(query("hook_get"), tenant, hook_id)
        if row is None:
            raise HookNotFound(f"hook {hook_id!r} not found")
        return subscription_of(row)

    async def delete(self, tenant: str, hook_id: str) -> None:
        async with translated("delete hook"):
            found = await self._pool.fetchval(query("hook_delete"), tenant, hook_id)
        if found is None:
            raise HookNotFound(f"hook {hook_id!r} not found")

    async def rotate(
        self, tenant: str, hook_id: str, secret: str, grace_s: float = _ROTATION_GRACE_S
    ) -> Subscription:
        """Sign with `secret` from now on, and with the previous one too for grace_s."""
        async with translated("rotate hook secret"):
            row = await self._pool.fetchrow(query("hook_rotate"), tenant, hook_id, secret, grace_s)
        if row is None:
            raise HookNotFound(f"hook {hook_id!r} not found")
        return subscription_of(row)

    async def deliveries(
        self, hook_id: str, status: str | None, cursor: int, limit: int
    ) -> list[Delivery]:
        """Newest first, after the cursor (the last id of the previous page; 0 for the first)."""
        async with translated("list hook deliveries"):
            rows = await self._pool.fetch(
                query("hook_deliveries_page"), hook_id, status, cursor, limit
            )
        return [_delivery(row) for row in rows]

    async def delivery(self, hook_id: str, delivery_id: int) -> tuple[Delivery, list[Attempt]]:
        async with translated("read hook delivery"):
            row = await self._pool.fetchrow(query("hook_delivery_get"), hook_id, delivery_id)
            if row is None:
                raise DeliveryNotFound(f"delivery {delivery_id} of hook {hook_id!r} not found")
            attempts = await self._pool.fetch(query("hook_attempts_of"), delivery_id)
        return _delivery(row), [Attempt(**dict(a)) for a in attempts]

    async def redeliver(self, hook_id: str, delivery_id: int) -> Delivery:
        async with translated("redeliver"):
            row = await self._pool.fetchrow(query("hook_redeliver"), hook_id, delivery_id)
        if row is None:
            raise DeliveryNotFound(f"delivery {delivery_id} of hook {hook_id!r} not found")
        return _delivery(row)

    async def queue_again(self, rows: Sequence[NewDelivery]) -> None:
        """Write (or reset to pending) the rows of a replay."""
        if not rows:
            return
        async with translated("queue replayed deliveries"):
            await self._pool.execute(query("hook_replay_deliveries"), *delivery_columns(rows))

    async def sessions(
        self, tenant: str, after: str, prefix: str | None, limit: int
    ) -> list[tuple[str, bool]]:
        """The tenant's sessions after a cursor, by id, each with whether it is native."""
        async with translated("list sessions to replay"):
            rows = await self._pool.fetch(
                query("hook_replay_sessions"), tenant, after, prefix, limit
            )
        return [(row["session_id"], row["state_owner"] == "keel") for row in rows]

    async def ledger_range(self, tenant: str, session: str, after: int, upto: int) -> list[Event]:
        """The session's committed events with after < seq <= upto, in seq order."""
        async with translated("read ledger range"):
            rows = await self._pool.fetch(query("ledger_range"), tenant, session, after, upto)
        return [event_of(tenant, session, row) for row in rows]
