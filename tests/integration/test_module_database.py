"""A module's shared database is, for each test, as good as a fresh clone of the template."""

from __future__ import annotations

import asyncpg

from keel_stream.store import PostgresLedger, create_pool
from tests.support.postgres import ModuleDatabase, PgServer


async def test_each_test_gets_an_empty_database_with_the_seed_rows_and_no_leftover_connection(
    pg_server: PgServer, template_database: str
) -> None:
    database = ModuleDatabase(pg_server.admin_dsn, template_database)
    try:
        first = await database.fresh()
        seeded = await _count(first, "projection_generations")
        pool = await create_pool(first, max_size=2)
        ledger = PostgresLedger(pool)
        await ledger.create_tenant("acme")
        await ledger.create_session("acme", "s1")
        leftover = await asyncpg.connect(first)
        await leftover.execute("SELECT pg_advisory_lock(7)")

        second = await database.fresh()

        assert second == first
        assert await _count(second, "sessions") == 0
        assert await _count(second, "tenants") == 0
        assert await _count(second, "projection_generations") == seeded > 0
        assert leftover.is_closed() or not await _alive(leftover)
        await pool.close()
    finally:
        await database.drop()


async def test_a_test_that_changed_the_schema_leaves_a_fresh_clone_to_the_next(
    pg_server: PgServer, template_database: str
) -> None:
    database = ModuleDatabase(pg_server.admin_dsn, template_database)
    try:
        first = await database.fresh()
        conn = await asyncpg.connect(first)
        await conn.execute("ALTER TABLE sessions DISABLE TRIGGER ALL")
        await conn.close()

        second = await database.fresh()

        assert second != first
        conn = await asyncpg.connect(second)
        disabled = await conn.fetchval(
            "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'sessions'::regclass"
            " AND tgenabled = 'D'"
        )
        await conn.close()
        assert disabled == 0
    finally:
        await database.drop()


async def _count(dsn: str, table: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval(f"SELECT count(*) FROM {table}"))
    finally:
        await conn.close()


async def _alive(conn: asyncpg.Connection) -> bool:
    try:
        await conn.fetchval("SELECT 1")
    except (asyncpg.PostgresError, asyncpg.InterfaceError, ConnectionError):
        return False
    return True
