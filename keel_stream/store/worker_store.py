"""What a worker needs of the store: the ledger, its run rows, the tenants' configuration
documents, and wake-ups (a commit happened; a client asked to cancel a session's attempt), on
PostgreSQL (LISTEN) or in memory."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from keel_stream.store.deadlines import Deadlines, MemoryDeadlines
from keel_stream.store.memory import MemoryStore
from keel_stream.store.postgres_store import open_store
from keel_stream.store.protocol import Ledger, Runs
from keel_stream.store.subagents import MemorySubagents, Subagents
from keel_stream.store.tenant_configs import StoredConfig

__all__ = ["TenantConfigReader", "WorkerStore", "memory_worker_store", "postgres_worker_store"]

OnCommit = Callable[[], None]
OnCancel = Callable[[str, str], None]
"""Called with (tenant, session)."""


class TenantConfigReader(Protocol):
    async def latest(self, tenant: str) -> StoredConfig | None:
        """The newest stored version of the tenant's document, or None."""
        ...


@dataclass(frozen=True, slots=True)
class WorkerStore:
    ledger: Ledger
    runs: Runs
    configs: TenantConfigReader | None = None
    """None: no stored documents (the memory store); only the boot document applies."""
    deadlines: Deadlines = field(default_factory=MemoryDeadlines)
    """Open decisions' expiry times (the expiry sweeper's index)."""
    subagents: Subagents = field(default_factory=MemorySubagents)
    """Which session is a child of which (subagents)."""


@contextlib.asynccontextmanager
async def postgres_worker_store(
    database_url: str,
    owner: str,
    lease_ttl_s: float,
    pool_size: int,
    on_commit: OnCommit,
    on_cancel: OnCancel,
) -> AsyncIterator[WorkerStore]:
    store = await open_store(database_url, max_size=pool_size)

    def cancelled(payload: str) -> None:
        tenant, _, session = payload.partition("/")
        on_cancel(tenant, session)

    # The same LISTEN door as the API's: a lost connection is listened again with backoff.
    listeners = [
        store.listener("keel_commits", lambda _payload: on_commit()),
        store.listener("keel_cancels", cancelled),
    ]
    try:
        for listener in listeners:
            await listener.start()
        yield WorkerStore(
            store.ledger(),
            store.runs(owner, lease_ttl_s),
            store.tenant_configs(),
            store.deadlines(),
            store.subagents(),
        )
    finally:
        for listener in listeners:
            await listener.stop()
        await store.close()


@contextlib.asynccontextmanager
async def memory_worker_store(
    store: MemoryStore, owner: str, lease_ttl_s: float, on_commit: OnCommit, on_cancel: OnCancel
) -> AsyncIterator[WorkerStore]:
    def committed(_event: object) -> None:
        on_commit()

    store.commit_listeners.append(committed)
    store.cancel_listeners.append(on_cancel)
    try:
        yield WorkerStore(
            store, store.runs(owner, lease_ttl_s), None, store.deadlines(), store.subagents()
        )
    finally:
        store.commit_listeners.remove(committed)
        store.cancel_listeners.remove(on_cancel)
