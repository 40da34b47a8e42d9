"""The PostgreSQL backend: one pool, owned here from `open_store` to `close()`, and every
repository on it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import asyncpg

from keel_stream.store.admin import Admin, PostgresAdmin
from keel_stream.store.backend import Database
from keel_stream.store.connect import create_pool
from keel_stream.store.deadlines import Deadlines, PostgresDeadlines
from keel_stream.store.external_sessions import ExternalSessions, PostgresExternalSessions
from keel_stream.store.hooks import HookStore, PostgresHookStore
from keel_stream.store.hooks_dispatch import HookDispatchStore, PostgresHookDispatchStore
from keel_stream.store.hooks_queue import HookQueue, PostgresHookQueue
from keel_stream.store.keys import KeyStore, PostgresKeyStore
from keel_stream.store.notifications import Listener, PostgresListener
from keel_stream.store.ops import OpsReader, PostgresOpsReader
from keel_stream.store.outbox import Outbox, PostgresOutbox
from keel_stream.store.postgres import PostgresLedger
from keel_stream.store.projection_parked import ParkedStore
from keel_stream.store.projection_state import PostgresProjectionStore, ProjectionStore
from keel_stream.store.protocol import Ledger, Runs
from keel_stream.store.runs import PostgresRuns
from keel_stream.store.service_heartbeats import PostgresServiceHeartbeats, ServiceHeartbeats
from keel_stream.store.sessions import PostgresSessions, Sessions
from keel_stream.store.subagents import PostgresSubagents, SubagentTree
from keel_stream.store.tenant_configs import PostgresTenantConfigs, TenantConfigs
from keel_stream.store.triggers import PostgresTriggerStore, TriggerStore
from keel_stream.store.triggers_schedule import PostgresTriggerScheduleStore, TriggerScheduleStore
from keel_stream.store.verify_reads import PostgresVerifyReads, VerifyReads

__all__ = ["PostgresStore", "open_store", "opened_store", "relay_outbox"]


class PostgresStore:
    """Implements Database on one pool. The ledger (which gathers commits into group calls)
    and the projection store are one each; the other repositories hold nothing but the pool."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._ledger = PostgresLedger(pool)
        self._projections = PostgresProjectionStore(pool)

    def ledger(self) -> Ledger:
        return self._ledger

    def runs(self, owner: str, lease_ttl_s: float) -> Runs:
        return PostgresRuns(self._pool, owner, lease_ttl_s)

    def projections(self) -> ProjectionStore:
        return self._projections

    def parked(self) -> ParkedStore:
        return self._projections.parked()

    def outbox(self) -> Outbox:
        return PostgresOutbox(self._pool)

    def deadlines(self) -> Deadlines:
        return PostgresDeadlines(self._pool)

    def subagents(self) -> SubagentTree:
        return PostgresSubagents(self._pool)

    def external_sessions(self) -> ExternalSessions:
        return PostgresExternalSessions(self._pool)

    def service_heartbeats(self) -> ServiceHeartbeats:
        return PostgresServiceHeartbeats(self._pool)

    def tenant_configs(self) -> TenantConfigs:
        return PostgresTenantConfigs(self._pool)

    def keys(self) -> KeyStore:
        return PostgresKeyStore(self._pool)

    def sessions(self) -> Sessions:
        return PostgresSessions(self._pool)

    def hooks(self, *, max_per_tenant: int = 20) -> HookStore:
        return PostgresHookStore(self._pool, max_per_tenant=max_per_tenant)

    def hook_dispatch(self) -> HookDispatchStore:
        return PostgresHookDispatchStore(self._pool)

    def hook_queue(self) -> HookQueue:
        return PostgresHookQueue(self._pool)

    def triggers(self, *, max_per_tenant: int = 100) -> TriggerStore:
        return PostgresTriggerStore(self._pool, max_per_tenant=max_per_tenant)

    def trigger_schedule(self) -> TriggerScheduleStore:
        return PostgresTriggerScheduleStore(self._pool)

    def ops(self) -> OpsReader:
        return PostgresOpsReader(self._pool)

    def verify_reads(self) -> VerifyReads:
        return PostgresVerifyReads(self._pool)

    def admin(self) -> Admin:
        return PostgresAdmin(self._pool)

    def listener(self, channel: str, on_payload: Callable[[str], None]) -> Listener:
        return PostgresListener(self._pool, channel, on_payload)

    async def close(self) -> None:
        await self._pool.close()


async def open_store(dsn: str, *, min_size: int = 1, max_size: int = 10) -> Database:
    """The PostgreSQL backend on a new pool of at most `max_size` connections."""
    return PostgresStore(await create_pool(dsn, min_size=min_size, max_size=max_size))


@asynccontextmanager
async def opened_store(dsn: str, *, max_size: int = 2) -> AsyncIterator[Database]:
    """A short-lived backend, closed when the block ends (command-line tools)."""
    store = await open_store(dsn, max_size=max_size)
    try:
        yield store
    finally:
        await store.close()


def relay_outbox(dsn: str, *, application_name: str) -> Outbox:
    """The outbox on connections of its own, each named `application_name` (a relay: a shard's
    lock lives as long as its connection, and pg_stat_activity tells which relay holds it)."""
    return PostgresOutbox.connecting(dsn, application_name=application_name)
