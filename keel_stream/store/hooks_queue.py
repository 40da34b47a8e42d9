"""The senders' side of the hook deliveries: claims under a lease, completions fenced by it."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Final, Protocol

import asyncpg

from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query

__all__ = ["Claimed", "Completion", "HookQueue", "PostgresHookQueue"]

_MAX_ERROR: Final = 500


@dataclass(frozen=True, slots=True)
class Claimed:
    """A delivery claimed for one attempt, with what the attempt needs."""

    delivery_id: int
    hook_id: str
    tenant: str
    webhook_id: str
    body: str
    attempts: int
    """Attempts so far, this one included."""
    url: str
    secrets: tuple[str, ...]
    """The current secret, and the previous one during a rotation's grace period."""
    lease_token: str


@dataclass(frozen=True, slots=True)
class Completion:
    """How an attempt ended and what the row becomes."""

    status: str
    """pending (a retry is due after delay_s), delivered or dead."""
    delay_s: float
    http_status: int | None
    error: str | None
    duration_ms: int
    disable_reason: str | None = None
    """Set when the endpoint must be disabled (it answered 410 Gone)."""


class HookQueue(Protocol):
    """The due deliveries, as the senders claim and complete them under a lease."""

    async def claim(self, limit: int, lease_s: float) -> list[Claimed]:
        """Up to `limit` due deliveries of active subscriptions, each leased for lease_s."""
        ...

    async def complete(self, claimed: Claimed, done: Completion) -> bool:
        """Record the attempt and the row's new state; False when the claim was taken over (a
        redelivery or a replay reset the row meanwhile): nothing is written then."""
        ...

    async def backlog(self) -> int:
        """Deliveries due now to active subscriptions."""
        ...


class PostgresHookQueue:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def claim(self, limit: int, lease_s: float) -> list[Claimed]:
        """Up to `limit` due deliveries of active subscriptions, each leased for lease_s."""
        token = secrets.token_hex(8)
        async with translated("claim hook deliveries"):
            rows = await self._pool.fetch(query("hook_claim"), limit, token, lease_s)
        return [
            Claimed(
                delivery_id=row["delivery_id"],
                hook_id=row["hook_id"],
                tenant=row["tenant_id"],
                webhook_id=row["webhook_id"],
                body=row["body"],
                attempts=row["attempts"],
                url=row["url"],
                secrets=tuple(s for s in (row["secret"], row["previous"]) if s),
                lease_token=token,
            )
            for row in rows
        ]

    async def complete(self, claimed: Claimed, done: Completion) -> bool:
        """Record the attempt and the row's new state; False when the claim was taken over (a
        redelivery or a replay reset the row meanwhile): nothing is written then."""
        error = None if done.error is None else done.error[:_MAX_ERROR]
        async with (
            translated("complete hook delivery"),
            self._pool.acquire() as conn,
            conn.transaction(),
        ):
            attempts = await conn.fetchval(
                query("hook_complete"),
                claimed.delivery_id,
                claimed.lease_token,
                done.status,
                done.delay_s,
                done.http_status,
                error,
            )
            if attempts is None:
                return False
            await conn.execute(
                query("hook_attempt_insert"),
                claimed.delivery_id,
                attempts,
                done.http_status,
                error,
                done.duration_ms,
            )
            await conn.execute(query("hook_attempts_trim"), claimed.delivery_id)
            if done.disable_reason is not None:
                await conn.execute(query("hook_disable"), claimed.hook_id, done.disable_reason)
        return True

    async def backlog(self) -> int:
        """Deliveries due now to active subscriptions."""
        async with translated("count hook backlog"):
            return int(await self._pool.fetchval(query("hook_backlog")))
