"""The two backends as test-class mixins (the model: eventsourcing's recorder test cases).

A port's contract is one class of tests that asks for `backend`, a `Store`; it is subclassed
once per adapter, with the mixin that makes the backend:

    class TenantConfigsContract: ...
    class TestTenantConfigsOnPostgres(OnPostgres, TenantConfigsContract): ...
    class TestTenantConfigsInMemory(InMemory, TenantConfigsContract): ...

The contract class's name does not start with Test, so it only runs through its subclasses.
"""

from __future__ import annotations

import asyncpg
import pytest

from keel_stream.store import MemoryStore, PostgresStore, Store

__all__ = ["InMemory", "OnPostgres"]


class OnPostgres:
    @pytest.fixture
    async def backend(self, pool: asyncpg.Pool) -> Store:
        """The PostgreSQL backend on the test's database (the pool fixture closes the pool)."""
        store = PostgresStore(pool)
        await store.ledger().create_tenant("acme")
        return store


class InMemory:
    @pytest.fixture
    async def backend(self) -> Store:
        store = MemoryStore()
        await store.ledger().create_tenant("acme")
        return store
