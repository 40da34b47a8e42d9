"""Finding a real Kafka-protocol broker for the tests, in the architecture's order.

1. KEEL_TEST_KAFKA_BOOTSTRAP, when set;
2. a testcontainers Apache Kafka (KRaft), when a Docker engine answers;
3. the embedded broker (memory-only), started on a free loopback port.
Each test then uses its own topic prefix, so tests never read each other's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from aiokafka import AIOKafkaConsumer, TopicPartition

from keel_stream.kafka.broker import EmbeddedBroker
from keel_stream.kafka.records import EventRecordCodec
from keel_stream.kernel import Event
from tests.support.postgres import docker_engine_answers

__all__ = ["KafkaServer", "Received", "collect", "find_kafka"]


@dataclass(frozen=True)
class KafkaServer:
    bootstrap: str
    origin: str


@contextlib.contextmanager
def _testcontainers_kafka() -> Iterator[KafkaServer]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from testcontainers.community.kafka import KafkaContainer

    with KafkaContainer("confluentinc/cp-kafka:7.6.0").with_kraft() as container:
        yield KafkaServer(container.get_bootstrap_server(), "testcontainers")


@contextlib.contextmanager
def find_kafka() -> Iterator[KafkaServer]:
    url = os.environ.get("KEEL_TEST_KAFKA_BOOTSTRAP")
    if url:
        yield KafkaServer(url, "KEEL_TEST_KAFKA_BOOTSTRAP")
    elif docker_engine_answers():
        with _testcontainers_kafka() as server:
            yield server
    else:
        log = Path(tempfile.mkdtemp(prefix="keel-broker-")) / "broker.log"
        broker = EmbeddedBroker(log_path=log)
        try:
            broker.start()
        except RuntimeError as exc:
            text = log.read_text() if log.exists() else "(no log)"
            raise RuntimeError(f"{exc}\n{text}") from exc
        try:
            yield KafkaServer(broker.bootstrap, "embedded")
        finally:
            broker.stop()


@dataclass(frozen=True)
class Received:
    """A record as it arrived: the decoded event, its key and headers."""

    event: Event
    key: bytes
    headers: dict[str, bytes]
    partition: int


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
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, fetch_max_wait_ms=50
    )
    received: list[Received] = []
    await consumer.start()
    try:
        await consumer.topics()  # refreshes metadata of all (existing) topics
        partitions = consumer.partitions_for_topic(topic) or set()
        assert partitions, f"{topic} has no partitions (was the catalog applied?)"
        assigned = [TopicPartition(topic, p) for p in sorted(partitions)]
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
