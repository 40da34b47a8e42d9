"""Reading the tail of keel.events.v1: which events its last records already hold.

A relay that takes over from one that died between publishing a batch and deleting it from the
outbox, or that retries after a failed batch, reads each partition's last `depth` records first
and leaves out of its next batches the events found there, so the topic carries each event once.

Where each tail starts comes from ListOffsets, where it ends from the high-water mark of fetched
data: some Kafka-protocol brokers answer ListOffsets "latest" too low after multi-record batches
(never too high), which only makes the read start earlier than it needs to; the high-water mark
that comes back with fetched data is right on every broker.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaTimeoutError

from keel_stream.kafka import clients
from keel_stream.kafka.errors import kafka_translated
from keel_stream.kafka.records import EventRecordCodec
from keel_stream.kafka.settings import KafkaSettings

__all__ = ["SessionKey", "published_seqs"]

SessionKey = tuple[str, str]
"""(tenant, session)"""

_POLL_MS = 200


async def published_seqs(
    kafka: KafkaSettings, topic: str, depth: int, *, timeout_s: float = 30.0
) -> dict[SessionKey, set[int]]:
    """Per (tenant, session), the seqs found in the last `depth` records (at least) of each of
    the topic's partitions. Records that do not decode as events are passed over.

    Raises BrokerUnavailable when the broker cannot be reached or the read does not finish in
    timeout_s (a topic that does not exist is waited for until then), BrokerError for other
    failures.
    """
    found: dict[SessionKey, set[int]] = defaultdict(set)
    if depth <= 0:
        return {}
    async with kafka_translated(f"read the tail of {topic}"):
        try:
            async with asyncio.timeout(timeout_s):
                partitions = await _partitions(kafka, topic)
                await _read_tails(kafka, partitions, depth, found)
        except TimeoutError as exc:
            raise KafkaTimeoutError(f"the tail read did not finish in {timeout_s}s") from exc
    return dict(found)


async def _partitions(kafka: KafkaSettings, topic: str) -> list[TopicPartition]:
    """The topic's partitions, from a metadata request naming it (a consumer's own metadata
    lists no topic before it is assigned one). A topic created a moment ago may take a moment
    to appear: it is waited for, until the read's deadline."""
    admin = clients.admin(kafka, "relay-tail")
    try:
        await admin.start()
        while True:
            for described in await admin.describe_topics([topic]):
                if described["topic"] == topic and described["error_code"] == 0:
                    numbers = sorted(int(p["partition"]) for p in described["partitions"])
                    if numbers:
                        return [TopicPartition(topic, n) for n in numbers]
            await asyncio.sleep(_POLL_MS / 1000)
    finally:
        await admin.close()


async def _read_tails(
    kafka: KafkaSettings,
    partitions: list[TopicPartition],
    depth: int,
    found: dict[SessionKey, set[int]],
) -> None:
    consumer = clients.consumer(kafka, "relay-tail", enable_auto_commit=False, fetch_max_wait_ms=50)
    try:
        await consumer.start()
        await _read(consumer, partitions, depth, found)
    finally:
        await consumer.stop()


async def _read(
    consumer: AIOKafkaConsumer,
    partitions: list[TopicPartition],
    depth: int,
    found: dict[SessionKey, set[int]],
) -> None:
    consumer.assign(partitions)
    starts = await consumer.beginning_offsets(partitions)
    ends = await consumer.end_offsets(partitions)
    pending: set[TopicPartition] = set()
    for tp in partitions:
        if ends[tp] > starts[tp]:  # an empty partition has no tail
            consumer.seek(tp, max(starts[tp], ends[tp] - depth))
            pending.add(tp)
    while pending:
        batches = await consumer.getmany(*pending, timeout_ms=_POLL_MS)
        for records in batches.values():
            _collect((r.value for r in records), found)
        for tp in list(pending):
            high = consumer.highwater(tp)
            if high is not None and await consumer.position(tp) >= high:
                pending.discard(tp)


def _collect(values: Iterable[bytes | None], found: dict[SessionKey, set[int]]) -> None:
    for value in values:
        if value is None:
            continue
        try:
            event = EventRecordCodec.decode(value)
        except ValueError:  # not an event record: it cannot stand for an outbox row
            continue
        found[(event.tenant, event.session)].add(event.seq)
