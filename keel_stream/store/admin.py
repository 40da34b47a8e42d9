"""Operator actions behind the `keel-stream` command: migrating, pruning, tenants and keys.

The command-line package runs no SQL and never sees the driver; every statement it needs is
here, and driver failures leave as keel errors like everywhere else in the store.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

import asyncpg

from keel_stream.errors import TenantExists
from keel_stream.store.connect import connect
from keel_stream.store.driver_errors import translated
from keel_stream.store.keys import PostgresKeyStore
from keel_stream.store.migrate import MigrationReport, migrate
from keel_stream.store.postgres import PostgresLedger
from keel_stream.store.projection_reset import reset_offsets
from keel_stream.store.sqlfiles import query

__all__ = [
    "Admin",
    "KeyRow",
    "PostgresAdmin",
    "PruneReport",
    "migrate_database",
    "migration_summary",
    "ping",
]


@dataclass(frozen=True, slots=True)
class PruneReport:
    """What a prune deleted."""

    generations: int
    states: int


@dataclass(frozen=True, slots=True)
class KeyRow:
    """One API key as an operator sees it (the secret itself is never stored)."""

    key_id: str
    tenant: str
    created_at: datetime
    revoked_at: datetime | None


async def ping(dsn: str) -> None:
    """Connect once and leave: StoreUnavailable when the database cannot be reached."""
    conn = await connect(dsn, application_name="keel-stream")
    await conn.close()


async def migrate_database(dsn: str) -> MigrationReport:
    """Apply the schema migrations on a connection of its own."""
    conn = await connect(dsn, application_name="keel-stream migrate")
    try:
        return await migrate(conn)
    finally:
        await conn.close()


def migration_summary(report: MigrationReport) -> str:
    """One line for the operator: the schema version and what this run applied."""
    applied = ", ".join(report.applied) if report.applied else "nothing new"
    return f"schema version {report.version} (applied: {applied})"


class Admin(Protocol):
    """The operator's writes and lists that are no repository's: pruning, keys, offsets."""

    async def prune(self, projection: str | None) -> PruneReport:
        """Delete the retired generations of one projection (or of all); the live one stays."""
        ...

    async def list_keys(self, tenant: str | None = None, *, revoked: bool = False) -> list[KeyRow]:
        """The keys of a tenant (or of every tenant), active ones only unless revoked is set."""
        ...

    async def ensure_key(self, tenant: str, name: str, wanted: str | None) -> str:
        """The tenant (created if missing) and a key acting for it: wanted if it already does,
        else a new key (wanted as its secret when given)."""
        ...

    async def reset_offsets(self, topics: Sequence[str]) -> int:
        """Forget the stored projection offsets into these topics (keel_stream.store.
        projection_reset); how many partition offsets were forgotten."""
        ...


class PostgresAdmin:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def prune(self, projection: str | None) -> PruneReport:
        pool = self._pool
        async with translated("prune projections"), pool.acquire() as conn, conn.transaction():
            row = await conn.fetchrow(query("projection_prune"), projection)
            await conn.execute(query("projection_delete_retired"), projection)
        if row is None:  # an aggregate always answers one row
            return PruneReport(generations=0, states=0)
        return PruneReport(generations=int(row["generations"]), states=int(row["states"]))

    async def list_keys(self, tenant: str | None = None, *, revoked: bool = False) -> list[KeyRow]:
        async with translated("list keys"):
            rows = await self._pool.fetch(query("list_api_keys"), tenant, revoked)
        return [KeyRow(r["key_id"], r["tenant_id"], r["created_at"], r["revoked_at"]) for r in rows]

    async def ensure_key(self, tenant: str, name: str, wanted: str | None) -> str:
        with contextlib.suppress(TenantExists):
            await PostgresLedger(self._pool).create_tenant(tenant, name)
        keys = PostgresKeyStore(self._pool)
        if wanted is not None and await keys.tenant_for(wanted) == tenant:
            return wanted
        return (await keys.create(tenant, wanted))[1]

    async def reset_offsets(self, topics: Sequence[str]) -> int:
        return await reset_offsets(self._pool, topics)
