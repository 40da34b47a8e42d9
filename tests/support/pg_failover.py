"""A pg_auto_failover formation for a test: primary + synchronous standby, migrated, torn down."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from keel_stream.dev.pg_failover import FailoverFormation
from keel_stream.store import connect, migrate

__all__ = ["failover_formation"]


@asynccontextmanager
async def failover_formation() -> AsyncIterator[FailoverFormation]:
    """A started formation whose database is migrated; every process gone afterwards."""
    formation = FailoverFormation()
    try:
        await formation.start()
        conn = await connect(formation.dsn)
        try:
            await migrate(conn)
        finally:
            await conn.close()
        yield formation
    finally:
        formation.stop()
