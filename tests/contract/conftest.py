"""One contract, two adapters: every test here runs against PostgreSQL and the memory store."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from keel_stream.store import MemoryStore, PostgresLedger, PostgresRuns
from keel_stream.store.protocol import Ledger, Runs


@dataclass
class Adapter:
    name: str
    ledger: Ledger
    runs: Callable[[str, float], Runs]
    """A worker's view of the run rows: (owner, lease ttl in seconds)."""


@pytest.fixture(params=["postgres", "memory"])
def bare_adapter(request: pytest.FixtureRequest) -> Adapter:
    if request.param == "memory":
        store = MemoryStore()
        return Adapter("memory", store, store.runs)
    # Only the PostgreSQL adapter needs (and starts) a server: asked for here, not in the
    # signature, so the memory half of the suite runs without one.
    pool = request.getfixturevalue("pool")
    return Adapter(
        "postgres", PostgresLedger(pool), lambda owner, ttl: PostgresRuns(pool, owner, ttl)
    )


@pytest.fixture
async def adapter(bare_adapter: Adapter) -> Adapter:
    """An adapter with tenant acme and its native session s1."""
    adapter = bare_adapter
    await adapter.ledger.create_tenant("acme")
    await adapter.ledger.create_session("acme", "s1")
    return adapter
