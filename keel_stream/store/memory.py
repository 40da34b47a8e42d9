"""The memory backend: one process's ledger and every repository with a memory twin, for unit
tests and embedding (seed 002: persistence is a plugin; an in-memory store ships).

The MemoryStore is its own ledger (tests and embedders commit to it directly); the other
repositories share its state and each is made once.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from keel_stream.store.deadlines import Deadlines, MemoryDeadlines
from keel_stream.store.external_sessions import ExternalSessions, MemoryExternalSessions
from keel_stream.store.keys import KeyStore
from keel_stream.store.memory_ledger import MemoryLedger, MemoryRuns
from keel_stream.store.memory_outbox import MemoryOutbox
from keel_stream.store.memory_streams import MemoryProjectionStore
from keel_stream.store.memory_tenancy import MemoryKeyStore, MemoryTenantConfigs
from keel_stream.store.outbox import Outbox
from keel_stream.store.projection_parked import ParkedStore
from keel_stream.store.projection_state import ProjectionStore
from keel_stream.store.protocol import Ledger
from keel_stream.store.service_heartbeats import MemoryServiceHeartbeats, ServiceHeartbeats
from keel_stream.store.subagents import MemorySubagents, Subagents
from keel_stream.store.tenant_configs import TenantConfigs

__all__ = ["MemoryRuns", "MemoryStore"]


class MemoryStore(MemoryLedger):
    """Implements keel_stream.store.backend.Store in memory."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(clock)
        self._projections = MemoryProjectionStore(self)
        self._outbox = MemoryOutbox(self)
        self._deadlines = MemoryDeadlines()
        self._subagents = MemorySubagents()
        self._external = MemoryExternalSessions(self)
        self._heartbeats = MemoryServiceHeartbeats(clock)
        self._configs = MemoryTenantConfigs(self.has_tenant)
        self._keys = MemoryKeyStore(self.has_tenant)

    def ledger(self) -> Ledger:
        return self

    def projections(self) -> ProjectionStore:
        return self._projections

    def parked(self) -> ParkedStore:
        return self._projections.parked()

    def outbox(self) -> Outbox:
        return self._outbox

    def deadlines(self) -> Deadlines:
        return self._deadlines

    def subagents(self) -> Subagents:
        return self._subagents

    def external_sessions(self) -> ExternalSessions:
        return self._external

    def service_heartbeats(self) -> ServiceHeartbeats:
        return self._heartbeats

    def tenant_configs(self) -> TenantConfigs:
        return self._configs

    def keys(self) -> KeyStore:
        return self._keys

    async def close(self) -> None:
        """Nothing to release: the state lives as long as the object."""
