"""One contract, two adapters: every test here runs against PostgreSQL and the memory store.

The ledger and run-row suites take `adapter` (parametrized over both backends); the other ports
are contract classes subclassed per backend (tests/contract/backends.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from keel_stream.store import MemoryStore, PostgresStore, Store
from keel_stream.store.protocol import Ledger, Runs


@dataclass
class Adapter:
    name: str
    ledger: Ledger
    runs: Callable[[str, float], Runs]
    """A worker's view of the run rows: (owner, lease ttl in seconds)."""


@pytest.fixture(params=["postgres", "memory"])
def bare_adapter(request: pytest.FixtureRequest) -> Adapter:
    backend: Store
    if request.param == "memory":
        backend = MemoryStore()
    else:
        # Only the PostgreSQL adapter needs (and starts) a server: asked for here, not in the
        # signature, so the memory half of the suite runs without one.
        backend = PostgresStore(request.getfixturevalue("pool"))
    return Adapter(request.param, backend.ledger(), backend.runs)


@pytest.fixture
async def adapter(bare_adapter: Adapter) -> Adapter:
    """An adapter with tenant acme and its native session s1."""
    adapter = bare_adapter
    await adapter.ledger.create_tenant("acme")
    await adapter.ledger.create_session("acme", "s1")
    return adapter
