"""Servers for benchmarks: KEEL_DATABASE_URL / KEEL_KAFKA_BOOTSTRAP, else local ones.

PostgreSQL: the embedded one. Kafka: Apache Kafka from Maven (the tests' default broker) where
Java and Maven (or its cached jars) are found, else the embedded broker; KEEL_BENCH_KAFKA=embedded
or =apache chooses. Which broker ran is said on stderr (stdout ends with the figures)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from keel_stream.dev.postgres import EmbeddedPostgres
from keel_stream.kafka.apache import ApacheKafka
from keel_stream.kafka.apache_resolve import unavailable
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
        print(f"kafka: KEEL_KAFKA_BOOTSTRAP={url}", file=sys.stderr)
        yield url
        return
    choice = os.environ.get("KEEL_BENCH_KAFKA", "auto")
    missing = unavailable()
    if choice == "apache" or (choice == "auto" and missing is None):
        with _apache_kafka() as bootstrap:
            yield bootstrap
        return
    why = "KEEL_BENCH_KAFKA=embedded" if choice == "embedded" else f"no Apache Kafka: {missing}"
    print(f"kafka: the embedded broker ({why})", file=sys.stderr)
    with EmbeddedBroker() as broker:
        yield broker.bootstrap


@contextlib.contextmanager
def _apache_kafka() -> Iterator[str]:
    root = Path(tempfile.mkdtemp(prefix="keel-bench-kafka-"))
    try:
        with ApacheKafka(root / "kafka") as server:
            print(f"kafka: apache-kafka {server.version} (maven)", file=sys.stderr)
            yield server.bootstrap
    finally:
        shutil.rmtree(root, ignore_errors=True)


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
