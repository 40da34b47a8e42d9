"""Shared fixtures: a real PostgreSQL per run, a migrated database per module emptied per test."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator

import asyncpg
import pytest

from keel_stream.kafka.admin import apply_catalog
from keel_stream.store import PostgresLedger, connect, create_pool, migrate
from tests.support.kafka import SHARED_VAR, KafkaServer, find_kafka, kafka_plan, shared
from tests.support.postgres import (
    ModuleDatabase,
    PgServer,
    create_database,
    database_url,
    drop_database,
    find_postgres,
    unique_name,
)
from tests.support.quality import MODULE_LINES, long_modules


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    try:
        with find_postgres() as server:
            yield server
    except RuntimeError as exc:
        pytest.exit(str(exc), returncode=3)


async def _migrated_template(server: PgServer) -> str:
    name = unique_name("keel_tpl")
    await create_database(server.admin_dsn, name)
    conn = await connect(database_url(server.admin_dsn, name))
    try:
        await migrate(conn)
    finally:
        await conn.close()
    return name


@pytest.fixture(scope="session")
def template_database(pg_server: PgServer) -> Iterator[str]:
    """A database migrated once per run; each test copies it."""
    name = asyncio.run(_migrated_template(pg_server))
    yield name
    asyncio.run(drop_database(pg_server.admin_dsn, name))


@pytest.fixture
async def empty_database_dsn(pg_server: PgServer) -> AsyncIterator[str]:
    """A fresh database with no schema at all."""
    name = unique_name("keel_empty")
    await create_database(pg_server.admin_dsn, name)
    yield database_url(pg_server.admin_dsn, name)
    await drop_database(pg_server.admin_dsn, name)


@pytest.fixture(scope="module")
def module_database(pg_server: PgServer, template_database: str) -> Iterator[ModuleDatabase]:
    """One migrated database per test module, emptied before each of its tests."""
    database = ModuleDatabase(pg_server.admin_dsn, template_database)
    yield database
    asyncio.run(database.drop())


@pytest.fixture
async def database_dsn(module_database: ModuleDatabase) -> str:
    """A migrated database holding nothing but what the migrations seed, for one test."""
    return await module_database.fresh()


@pytest.fixture
async def pool(database_dsn: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await create_pool(database_dsn, min_size=1, max_size=10)
    yield pool
    await pool.close()


@pytest.fixture
def ledger(pool: asyncpg.Pool) -> PostgresLedger:
    return PostgresLedger(pool)


_KAFKA_STARTED = pytest.StashKey[KafkaServer]()
_SHARED_SERVERS = pytest.StashKey[contextlib.ExitStack]()


def pytest_configure(config: pytest.Config) -> None:
    """A parallel run (`-n N`, pytest-xdist): its controller starts PostgreSQL and the broker
    once and hands them to every worker (they inherit its environment), so N workers do not
    start N of each; a run without workers starts them on first use, in the fixtures below."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    servers = contextlib.ExitStack()
    config.stash[_SHARED_SERVERS] = servers
    try:
        postgres = servers.enter_context(find_postgres())
        broker = servers.enter_context(find_kafka())
    except RuntimeError as exc:
        servers.close()
        raise pytest.UsageError(str(exc)) from exc
    config.stash[_KAFKA_STARTED] = broker
    os.environ["KEEL_TEST_DATABASE_URL"] = postgres.admin_dsn
    os.environ[SHARED_VAR] = shared(broker)


def pytest_unconfigure(config: pytest.Config) -> None:
    servers = config.stash.get(_SHARED_SERVERS, None)
    if servers is not None:
        servers.close()


def pytest_report_header(config: pytest.Config) -> str:
    """Which broker the run will use (the `kafka` fixture starts it on first use)."""
    try:
        return f"kafka: {kafka_plan()}"
    except RuntimeError as exc:
        return f"kafka: {exc}"


SUMMARY_PROPERTY = "summary"
"""A test's `record_property("summary", text)` is printed at the end of the run (CI's log)."""


def pytest_terminal_summary(
    terminalreporter: pytest.TerminalReporter, config: pytest.Config
) -> None:
    server = config.stash.get(_KAFKA_STARTED, None)
    if server is not None:
        took = f", started in {server.start_s:.1f} s" if server.start_s is not None else ""
        terminalreporter.write_line(f"kafka: {server.origin} at {server.bootstrap}{took}")
    for report in [
        *terminalreporter.stats.get("passed", []),
        *terminalreporter.stats.get("failed", []),
    ]:
        for name, value in getattr(report, "user_properties", ()):
            if name == SUMMARY_PROPERTY:  # a test's figures for the run's log
                terminalreporter.write_line(f"{report.nodeid.split('::')[-1]}: {value}")
    long = long_modules()
    if long:  # a warning, not a failure: one concept per module, whatever its length
        terminalreporter.write_line(
            f"modules over {MODULE_LINES} lines (one concept each?): "
            + ", ".join(f"{path} {lines}" for path, lines in long)
        )


@pytest.fixture(scope="session")
def kafka(pytestconfig: pytest.Config) -> Iterator[KafkaServer]:
    try:
        with find_kafka() as server:
            pytestconfig.stash[_KAFKA_STARTED] = server
            yield server
    except RuntimeError as exc:
        pytest.exit(str(exc), returncode=3)


@pytest.fixture
async def topic_prefix(kafka: KafkaServer) -> str:
    """A fresh topic namespace for one test, with the catalog applied."""
    prefix = f"{unique_name('t')}."
    await apply_catalog(kafka.settings, prefix)
    return prefix
