"""What benchmarks/relay.py measures with: the latency consumer, the bare aiokafka producer it
compares the relay with, warm-ups, figures."""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import time
from datetime import UTC, datetime

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from keel_stream.kafka.admin import apply_catalog
from keel_stream.kafka.partitions import topic_partitions
from keel_stream.kafka.records import EventRecordCodec, OutgoingRecord, record_key
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.topics.catalog import EVENTS

SESSIONS = 100


WARM_UP = "warm-up"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def assigned_consumer(bootstrap: str, topic: str) -> AIOKafkaConsumer:
    """A consumer of an empty topic, positioned and warmed up before anything is sent."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=10)
    await consumer.start()
    partitions = await topic_partitions(KafkaSettings(bootstrap), [topic])
    consumer.assign(partitions)
    await consumer.seek_to_beginning(*partitions)
    await consumer.getmany(timeout_ms=100)
    return consumer


async def receive_latencies(
    consumer: AIOKafkaConsumer,
    count: int,
    timeout_s: float,
    returned: dict[tuple[str, int], float] | None = None,
    after_return: list[float] | None = None,
) -> list[float]:
    """Seconds from committedAt to arrival, for the first `count` distinct events; and into
    `after_return`, from the commit call's return (in `returned`, by session and seq) to
    arrival."""
    seen: set[tuple[str, int]] = set()
    latencies: list[float] = []
    deadline = time.monotonic() + timeout_s
    while len(seen) < count and time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=100)).values():
            now = time.time()
            for record in records:
                event = orjson.loads(record.value)
                key = (event["session"], event["seq"])
                if key in seen or event["session"].startswith(WARM_UP):
                    continue
                seen.add(key)
                committed = datetime.fromisoformat(event["committedAt"]).timestamp()
                latencies.append(now - committed)
                if returned is not None and after_return is not None and key in returned:
                    after_return.append(now - returned[key])
    return latencies


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:  # noqa: PTH123
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def warm_up_sessions(tenant: str) -> list[str]:
    """Sessions whose events land in every partition of the events topic, one each."""
    partitions = list(range(EVENTS.partitions))
    choose = DefaultPartitioner()
    sessions: dict[int, str] = {}
    for i in itertools.count():
        name = f"{WARM_UP}-{i}"
        sessions.setdefault(choose(record_key(tenant, name), partitions, partitions), name)
        if len(sessions) == EVENTS.partitions:
            return list(sessions.values())
    raise AssertionError("unreachable")


def encoded(n: int) -> list[OutgoingRecord]:
    """The bare producer's records: the relay's records for the same events."""
    return [
        EventRecordCodec.encode(
            "bench", f"s{i % SESSIONS}", i // SESSIONS + 1, "user.message",
            {"text": f"backlog {i}"}, datetime.now(UTC),
        )
        for i in range(n)
    ]  # fmt: skip


async def producer_peak(producer: AIOKafkaProducer, topic: str, n: int) -> float:
    """Events per second of a bare producer sending n records at once, until all are acked."""
    records = encoded(n)
    started = time.monotonic()
    futures = [
        await producer.send(topic, value=r.value, key=r.key, headers=r.headers) for r in records
    ]
    await asyncio.gather(*futures)
    return n / (time.monotonic() - started)


async def producer_latency(
    producer: AIOKafkaProducer, bootstrap: str, topic: str, rate: int, seconds: float
) -> list[float]:
    """Send-to-arrival latencies of a bare producer sending at `rate` for `seconds`."""
    total = int(rate * seconds)
    consumer = await assigned_consumer(bootstrap, topic)
    receiving = asyncio.create_task(receive_latencies(consumer, total, seconds + 60))
    begun = time.monotonic()
    for i in range(total):
        delay = begun + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        record = EventRecordCodec.encode(
            "base", f"s{i % SESSIONS}", i + 1, "user.message", {"text": f"steady {i}"},
            datetime.now(UTC),
        )  # fmt: skip
        await producer.send(topic, value=record.value, key=record.key, headers=record.headers)
    latencies = await receiving
    await consumer.stop()
    return latencies


async def warm_producer(producer: AIOKafkaProducer, topic: str) -> None:
    """One record acknowledged in every partition before measuring (as the relay's warm-up)."""
    record = EventRecordCodec.encode(
        "base", WARM_UP, 1, "user.message", {"text": "w"}, datetime.now(UTC)
    )
    futures = [
        await producer.send(topic, value=record.value, key=record.key, partition=p)
        for p in range(EVENTS.partitions)
    ]
    await asyncio.gather(*futures)


async def bare_producer(bootstrap: str) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=256 * 1024
    )
    await producer.start()
    return producer


async def fresh_topic(bootstrap: str, name: str) -> str:
    prefix = f"{name}_{secrets.token_hex(3)}."
    await apply_catalog(KafkaSettings(bootstrap), prefix)
    return prefix


async def warm_broker(bootstrap: str, n: int) -> None:
    """A fresh broker's produce and fetch paths warmed up (its JVM compiles them under load)
    before anything is measured: n records sent to a topic of their own and read back."""
    topic = EVENTS.full_name(await fresh_topic(bootstrap, "warm"))
    producer = await bare_producer(bootstrap)
    try:
        await producer_peak(producer, topic, n)
    finally:
        await producer.stop()
    consumer = await assigned_consumer(bootstrap, topic)
    try:
        read = 0
        while read < n:
            batches = await consumer.getmany(timeout_ms=1000)
            if not batches:
                break
            read += sum(len(records) for records in batches.values())
    finally:
        await consumer.stop()
