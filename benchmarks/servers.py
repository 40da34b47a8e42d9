"""Servers for benchmarks: KEEL_DATABASE_URL / KEEL_KAFKA_BOOTSTRAP, else embedded ones."""

from __future__ import annotations

import contextlib
import os
import secrets
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from keel_stream.dev.postgres import EmbeddedPostgres
from keel_stream.kafka.broker import EmbeddedBroker
from keel_stream.store import connect, migrate


@contextlib.contextmanager
def postgres() -> Iterator[str]:
    url = os.environ.get("KEEL_DATABASE_URL")
    if url:
        yield url
        return
    with EmbeddedPostgres(Path(tempfile.mkdtemp()) / "pg", keep_data=False) as server:
        yield server.dsn("postgres")


@contextlib.contextmanager
def kafka() -> Iterator[str]:
    url = os.environ.get("KEEL_KAFKA_BOOTSTRAP")
    if url:
        yield url
        return
    with EmbeddedBroker() as broker:
        yield broker.bootstrap


@contextlib.asynccontextmanager
async def scratch_database(dsn: str) -> AsyncIterator[str]:
    """A migrated database of its own, dropped afterwards."""
    name = f"keel_bench_{secrets.token_hex(4)}"
    admin = await connect(dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    bench_dsn = urlunsplit(urlsplit(dsn)._replace(path=f"/{name}"))
    try:
        conn = await connect(bench_dsn)
        await migrate(conn)
        await conn.close()
        yield bench_dsn
    finally:
        await admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        await admin.close()
