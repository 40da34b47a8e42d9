"""The hooks dispatcher's transaction: each session's fold locked with its last seq, the ledger
for gaps, the active subscriptions, and the deliveries written with the new folds."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol

import asyncpg
import orjson

from keel_stream.kernel.types import Event
from keel_stream.store.driver_errors import translated
from keel_stream.store.hooks import NewDelivery, Subscription, delivery_columns, subscription_of
from keel_stream.store.postgres import event_of
from keel_stream.store.sqlfiles import query

__all__ = [
    "DispatchTransaction",
    "HookDispatchStore",
    "PostgresDispatchTransaction",
    "PostgresHookDispatchStore",
    "StoredFold",
]

Key = tuple[str, str]
_LEDGER_END: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class StoredFold:
    last_seq: int
    state: Mapping[str, Any]
    native: bool


class DispatchTransaction(Protocol):
    """The statements of one dispatch transaction; it commits when its block ends cleanly."""

    async def lock_folds(self, keys: Iterable[Key]) -> dict[Key, StoredFold]: ...

    async def ledger_range(
        self, tenant: str, session: str, after: int, upto: int = _LEDGER_END
    ) -> list[Event]: ...

    async def subscriptions(self, tenants: Iterable[str]) -> list[Subscription]: ...

    async def insert_deliveries(self, rows: Sequence[NewDelivery]) -> None: ...

    async def write_folds(self, folds: Mapping[Key, tuple[int, Mapping[str, Any]]]) -> None: ...


class PostgresDispatchTransaction:
    """The statements of one dispatch transaction."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn

    async def lock_folds(self, keys: Iterable[Key]) -> dict[Key, StoredFold]:
        ordered = sorted(set(keys))
        columns = [[k[0] for k in ordered], [k[1] for k in ordered]]
        await self._conn.execute(query("hook_folds_ensure"), *columns)
        rows = await self._conn.fetch(query("hook_folds_lock"), *columns)
        return {
            (r["tenant_id"], r["session_id"]): StoredFold(
                r["last_seq"], r["state"], r["owner"] == "keel"
            )
            for r in rows
        }

    async def ledger_range(
        self, tenant: str, session: str, after: int, upto: int = _LEDGER_END
    ) -> list[Event]:
        rows = await self._conn.fetch(query("ledger_range"), tenant, session, after, upto)
        return [event_of(tenant, session, row) for row in rows]

    async def subscriptions(self, tenants: Iterable[str]) -> list[Subscription]:
        rows = await self._conn.fetch(query("hook_active_for_tenants"), sorted(set(tenants)))
        return [subscription_of(row) for row in rows]

    async def insert_deliveries(self, rows: Sequence[NewDelivery]) -> None:
        if rows:
            await self._conn.execute(query("hook_insert_deliveries"), *delivery_columns(rows))

    async def write_folds(self, folds: Mapping[Key, tuple[int, Mapping[str, Any]]]) -> None:
        keys = sorted(folds)
        await self._conn.execute(
            query("hook_folds_write"),
            [k[0] for k in keys],
            [k[1] for k in keys],
            [folds[k][0] for k in keys],
            [orjson.dumps(folds[k][1]).decode() for k in keys],
        )


class HookDispatchStore(Protocol):
    """Where the dispatcher turns committed events into deliveries, one transaction a batch."""

    def transaction(self) -> AbstractAsyncContextManager[DispatchTransaction]:
        """A transaction that commits when the block ends without an error."""
        ...


class PostgresHookDispatchStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[DispatchTransaction]:
        """A transaction that commits when the block ends without an error."""
        async with (
            translated("dispatch hooks"),
            self._pool.acquire() as conn,
            conn.transaction(),
        ):
            yield PostgresDispatchTransaction(conn)
