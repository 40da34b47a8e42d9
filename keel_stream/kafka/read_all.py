"""Reading a whole topic once, from each partition's log start up to its end as first seen.

Each partition's end is the high-water mark of the first fetch response for it (a fetch carries
the right mark on every broker; ListOffsets "latest" can be too low on some Kafka-protocol
brokers), so what arrives after the read started is left out and the read always ends. Records
come back in offset order per partition, batch by batch, without a consumer group.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaTimeoutError

from keel_stream.errors import BrokerError, TopicMissing
from keel_stream.kafka import clients
from keel_stream.kafka.errors import kafka_translated
from keel_stream.kafka.partitions import topic_partitions
from keel_stream.kafka.settings import KafkaSettings

__all__ = ["RawRecord", "TopicRead", "read_to_end"]

_POLL_MS: Final = 200
_MAX_RECORDS: Final = 20_000
_METADATA_SETTLE_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class RawRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class TopicRead:
    """Where the read started and ended, per partition."""

    starts: dict[int, int]
    ends: dict[int, int]


async def read_to_end(
    kafka: KafkaSettings,
    topic: str,
    on_batch: Callable[[Sequence[RawRecord]], None],
    *,
    stall_timeout_s: float = 30.0,
) -> TopicRead:
    """Hand every record of the topic to on_batch, in offset order per partition, up to each
    partition's end as first seen; return where each partition started and ended.

    TopicMissing when the topic does not exist; BrokerUnavailable when the broker cannot be
    reached or no record arrives for stall_timeout_s while some are still due.
    """
    partitions = await _partitions(kafka, topic)
    async with kafka_translated(f"read {topic}"):
        consumer = clients.consumer(
            kafka,
            "verify",
            enable_auto_commit=False,
            # A reset the client starts by itself on assignment must not land at "latest": it
            # can win over a seek_to_beginning issued after it (seen on the embedded broker).
            auto_offset_reset="earliest",
            fetch_max_wait_ms=100,
            max_partition_fetch_bytes=8 * 1024 * 1024,
        )
        await consumer.start()
        try:
            starts = await consumer.beginning_offsets(partitions)
            consumer.assign(partitions)
            for tp in partitions:
                consumer.seek(tp, starts[tp])
            ends = await _read(consumer, starts, on_batch, stall_timeout_s)
        finally:
            await consumer.stop()
    return TopicRead(
        starts={tp.partition: starts[tp] for tp in partitions},
        ends={tp.partition: ends[tp] for tp in partitions},
    )


async def _partitions(kafka: KafkaSettings, topic: str) -> list[TopicPartition]:
    """The topic's partitions; a topic created a moment ago (Apache Kafka lists it up to ~0.5 s
    late) is asked for again for a few seconds before it counts as missing."""
    loop = asyncio.get_running_loop()
    settled = loop.time() + _METADATA_SETTLE_S
    while not (await _listed(kafka, topic) and (found := await topic_partitions(kafka, [topic]))):
        if loop.time() > settled:
            raise TopicMissing(f"topic {topic} does not exist (run `keel-stream topics apply`)")
        await asyncio.sleep(_POLL_MS / 1000)
    return found


async def _listed(kafka: KafkaSettings, topic: str) -> bool:
    """Whether the broker lists the topic. Asked first because a metadata request naming a
    topic makes some brokers create it (with default settings), and a read must never do that."""
    async with kafka_translated("list topics"):
        admin = clients.admin(kafka, "verify")
        try:
            await admin.start()
            return topic in await admin.list_topics()
        finally:
            await admin.close()


async def _read(
    consumer: AIOKafkaConsumer,
    starts: dict[TopicPartition, int],
    on_batch: Callable[[Sequence[RawRecord]], None],
    stall_timeout_s: float,
) -> dict[TopicPartition, int]:
    ends: dict[TopicPartition, int] = {}
    begun: set[TopicPartition] = set()
    pending = set(starts)
    loop = asyncio.get_running_loop()
    stalled_at = loop.time() + stall_timeout_s
    while pending:
        fetched = await consumer.getmany(*pending, timeout_ms=_POLL_MS, max_records=_MAX_RECORDS)
        batch: list[RawRecord] = []
        for tp, records in fetched.items():
            if tp not in begun:
                _check_first(tp, starts[tp], records[0].offset)
                begun.add(tp)
            ends.setdefault(tp, _first_end(consumer, tp))
            batch.extend(
                RawRecord(tp.partition, r.offset, r.key, r.value)
                for r in records
                if r.offset < ends[tp]
            )
        if batch:
            on_batch(batch)
            stalled_at = loop.time() + stall_timeout_s
        for tp in list(pending):
            if tp not in ends and consumer.highwater(tp) is not None:
                ends[tp] = _first_end(consumer, tp)
            if tp in ends and await consumer.position(tp) >= ends[tp]:
                pending.discard(tp)
        if pending and loop.time() > stalled_at:
            raise KafkaTimeoutError(f"no record arrived for {stall_timeout_s}s")
    return ends


def _check_first(tp: TopicPartition, start: int, offset: int) -> None:
    """The first record read must be the log's first: a read that starts later would report
    every record before it missing."""
    if offset > start:
        raise BrokerError(
            f"read {tp.topic}[{tp.partition}]: started at offset {offset}, not at the log start "
            f"{start}; run the verification again"
        )


def _first_end(consumer: AIOKafkaConsumer, tp: TopicPartition) -> int:
    high = consumer.highwater(tp)
    if high is None:  # records came back, so a fetch response (with its mark) was handled
        raise KafkaTimeoutError(f"no high-water mark for {tp.topic}[{tp.partition}]")
    return int(high)
