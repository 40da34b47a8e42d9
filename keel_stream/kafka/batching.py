"""Handing a relay batch to the producer as one record batch per partition.

aiokafka's per-record `send` costs more Python per record than the rest of the relay together
(partitioning in pure Python, a future per record); its batch API appends a record to a C
builder. The partition of each key is the one `send` would pick (aiokafka's default partitioner,
murmur2 like the Java client), so a session's events stay in the partition they always had, and
a record over the producer's size limit is refused before it is queued, as `send` refuses it.

Order: the batches of a partition are queued in record order, and the producer's sender keeps
one produce request per broker in flight and puts a batch it retries back at the head of its
partition's queue, so a partition's records reach the broker in the order they were queued.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import MessageSizeTooLargeError
from aiokafka.partitioner import murmur2
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from keel_stream.kafka.records import OutgoingRecord

__all__ = ["Partitioner", "Queued", "queue_records"]


class Partitioner:
    """The partition of a record key, as aiokafka's DefaultPartitioner picks it, remembered per
    key (a session's key comes back with every event) for as long as the partition count holds."""

    def __init__(self) -> None:
        self._partitions: list[int] = []
        self._known: dict[bytes, int] = {}

    def use(self, partitions: Iterable[int]) -> None:
        ordered = sorted(partitions)
        if ordered != self._partitions:
            self._partitions = ordered
            self._known.clear()

    def __call__(self, key: bytes) -> int:
        partition = self._known.get(key)
        if partition is None:
            index = (murmur2(key) & 0x7FFFFFFF) % len(self._partitions)
            partition = self._known[key] = self._partitions[index]
        return partition


@dataclass(slots=True)
class Queued:
    """A relay batch handed to the producer: per record queued, the index of its batch's future
    (records after a failure were not queued); and the error that stopped queueing, if one did."""

    futures: list[asyncio.Future[Any]] = field(default_factory=list)
    owners: list[int] = field(default_factory=list)
    error: BaseException | None = None


@dataclass(slots=True)
class _Builders:
    """Per partition, the builders filled so far in order; and per record, its builder."""

    by_partition: dict[int, list[BatchBuilder]] = field(default_factory=dict)
    owners: list[tuple[int, int]] = field(default_factory=list)

    def add(self, producer: AIOKafkaProducer, partition: int, record: OutgoingRecord) -> None:
        builders = self.by_partition.setdefault(partition, [])
        for fresh in (False, True):
            if fresh or not builders:
                builders.append(producer.create_batch())
            appended = builders[-1].append(
                timestamp=None, key=record.key, value=record.value, headers=record.headers
            )
            if appended is not None:
                self.owners.append((partition, len(builders) - 1))
                return
        raise MessageSizeTooLargeError("the record does not fit an empty batch")

    def in_order(self) -> Iterator[tuple[int, int, BatchBuilder]]:
        for partition, builders in self.by_partition.items():
            for index, builder in enumerate(builders):
                yield partition, index, builder


def _checked(record: OutgoingRecord, max_bytes: int) -> OutgoingRecord:
    size = DefaultRecordBatchBuilder.estimate_size_in_bytes(
        record.key, record.value, record.headers
    )
    if size > max_bytes:
        raise MessageSizeTooLargeError(
            f"The message is {size} bytes when serialized which is larger than the maximum "
            "request size you have configured with the max_request_size configuration"
        )
    return record


async def queue_records(
    producer: AIOKafkaProducer,
    topic: str,
    records: Iterable[OutgoingRecord],
    partitioner: Partitioner,
    max_bytes: int,
    on_settled: Callable[[asyncio.Future[Any]], None],
) -> Queued:
    """Queue records, in order, as closed batches (sent without lingering); `on_settled` is
    called back as each batch is acknowledged or fails, and is in place before any later batch
    is queued. Encoding or refusing a record (the iterator raising, or a record over
    `max_bytes`) stops there: the records before it are queued, the rest are not, and the error
    is returned."""
    queued = Queued()
    builders = _Builders()
    try:
        partitioner.use(await producer.partitions_for(topic))
        for record in records:
            _checked(record, max_bytes)
            builders.add(producer, partitioner(record.key), record)
    except Exception as exc:  # noqa: BLE001 - ends the batch here; what was built goes
        queued.error = exc
    slots: dict[tuple[int, int], int] = {}
    refused: BaseException | None = None
    try:
        for partition, index, builder in builders.in_order():
            builder.close()  # closed: drained at once, and nothing else appended to it
            future = await producer.send_batch(builder, topic, partition=partition)
            future.add_done_callback(on_settled)
            slots[(partition, index)] = len(queued.futures)
            queued.futures.append(future)
    except Exception as exc:  # noqa: BLE001 - a batch the producer did not take: none after
        refused = exc
    for owner in builders.owners:
        slot = slots.get(owner)
        if slot is None:  # queueing stopped before this record's batch
            queued.error = refused
            break
        queued.owners.append(slot)
    return queued
