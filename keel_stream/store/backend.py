"""A backend: the object that owns the engine (a PostgreSQL pool, or one process's memory) and
hands out its repositories, each typed by its port. Callers outside the store hold a `Store` or a
`Database`, never a pool or an adapter class; `close()` is the backend's.

`Store` is what both backends give (tests/contract/ runs every port against both). `Database`
adds the ports whose behaviour is PostgreSQL's own and that only it implements: queues claimed
with SKIP LOCKED and leases, LISTEN, transactions over several tables, the operator's reads of
the catalog and of the ledger at large.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from keel_stream.store.admin import Admin
from keel_stream.store.deadlines import Deadlines
from keel_stream.store.external_sessions import ExternalSessions
from keel_stream.store.hooks import HookStore
from keel_stream.store.hooks_dispatch import HookDispatchStore
from keel_stream.store.hooks_queue import HookQueue
from keel_stream.store.keys import KeyStore
from keel_stream.store.notifications import Listener
from keel_stream.store.ops import OpsReader
from keel_stream.store.outbox import Outbox
from keel_stream.store.projection_parked import ParkedStore
from keel_stream.store.projection_state import ProjectionStore
from keel_stream.store.protocol import Ledger, Runs
from keel_stream.store.service_heartbeats import ServiceHeartbeats
from keel_stream.store.sessions import Sessions
from keel_stream.store.subagents import Subagents, SubagentTree
from keel_stream.store.tenant_configs import TenantConfigs
from keel_stream.store.triggers import TriggerStore
from keel_stream.store.triggers_schedule import TriggerScheduleStore
from keel_stream.store.verify_reads import VerifyReads

__all__ = ["Database", "Store"]


class Store(Protocol):
    """The ports every backend implements. Each call hands out the backend's repository (the
    same state every time); `close()` releases the engine, after which none may be used."""

    def ledger(self) -> Ledger: ...

    def runs(self, owner: str, lease_ttl_s: float) -> Runs:
        """The run rows as one worker (owner, lease ttl) sees them."""
        ...

    def projections(self) -> ProjectionStore: ...

    def parked(self) -> ParkedStore: ...

    def outbox(self) -> Outbox: ...

    def deadlines(self) -> Deadlines: ...

    def subagents(self) -> Subagents: ...

    def external_sessions(self) -> ExternalSessions: ...

    def service_heartbeats(self) -> ServiceHeartbeats: ...

    def tenant_configs(self) -> TenantConfigs: ...

    def keys(self) -> KeyStore: ...

    async def close(self) -> None: ...


class Database(Store, Protocol):
    """The PostgreSQL backend's further ports."""

    def subagents(self) -> SubagentTree:
        """The links with the reads of whole trees (they join the run rows)."""
        ...

    def sessions(self) -> Sessions: ...

    def hooks(self, *, max_per_tenant: int = 20) -> HookStore: ...

    def hook_dispatch(self) -> HookDispatchStore: ...

    def hook_queue(self) -> HookQueue: ...

    def triggers(self, *, max_per_tenant: int = 100) -> TriggerStore: ...

    def trigger_schedule(self) -> TriggerScheduleStore: ...

    def ops(self) -> OpsReader: ...

    def verify_reads(self) -> VerifyReads: ...

    def admin(self) -> Admin: ...

    def listener(self, channel: str, on_payload: Callable[[str], None]) -> Listener:
        """A LISTEN on `channel` (started by its caller), lost connections listened again."""
        ...
