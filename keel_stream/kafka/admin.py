"""Applying the catalog to a broker, and describing what is there.

apply creates every missing topic explicitly (a broker may auto-create an unknown topic with
default settings the moment a client asks for its metadata, so nothing may touch a topic before
apply ran) and reports configuration drift without changing existing topics.

describe reads each partition's high-water mark from fetched data rather than from ListOffsets
alone: some Kafka-protocol brokers answer ListOffsets "latest" wrongly after multi-record
batches, and fetch responses carry the right high-water mark on every broker.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from keel_stream.kafka import clients
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.topics.catalog import CATALOG, TopicSpec

__all__ = [
    "ApplyReport",
    "PartitionState",
    "admin_client",
    "apply_catalog",
    "describe_topics",
    "high_water_marks",
]

_TOPIC_ALREADY_EXISTS = 36
_METADATA_SETTLE_S = 5.0


@dataclass
class ApplyReport:
    """What apply did and what it found different from the catalog."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.drift


@contextlib.asynccontextmanager
async def admin_client(
    kafka: KafkaSettings, role: str = "admin"
) -> AsyncIterator[AIOKafkaAdminClient]:
    """A started admin client, closed on the way out."""
    admin = clients.admin(kafka, role)
    await admin.start()
    try:
        yield admin
    finally:
        await admin.close()


async def _partition_counts(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    """Partitions per topic; a topic created a moment ago is waited for, up to a few seconds.

    Apache Kafka answers metadata for a new topic with UNKNOWN_TOPIC_OR_PARTITION or
    LEADER_NOT_AVAILABLE (or no partitions yet) until its controller has propagated it.
    """
    counts: dict[str, int] = {}
    pending = list(names)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _METADATA_SETTLE_S
    while pending:
        topics = await admin.describe_topics(pending)
        for topic in topics:
            if topic["error_code"] == 0 and topic["partitions"]:
                counts[topic["topic"]] = len(topic["partitions"])
        pending = [n for n in pending if n not in counts]
        if not pending or loop.time() >= deadline:
            break
        await asyncio.sleep(0.1)
    return counts


async def _configs(admin: AIOKafkaAdminClient, name: str) -> dict[str, str]:
    responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
    found: dict[str, str] = {}
    for response in responses:
        for resource in response.resources:
            for entry in resource[4]:
                found[entry[0]] = entry[1]
    return found


def topic_configs(spec: TopicSpec, kafka: KafkaSettings) -> dict[str, str]:
    """The topic's configs as apply creates it: the catalog's, and the settings'
    min.insync.replicas when set."""
    configs = spec.configs()
    if kafka.min_insync_replicas is not None:
        configs["min.insync.replicas"] = str(kafka.min_insync_replicas)
    return configs


async def apply_catalog(
    kafka: KafkaSettings, prefix: str = "", catalog: Iterable[TopicSpec] = CATALOG
) -> ApplyReport:
    """Create missing topics; report partitions and configs that differ from the catalog."""
    specs = list(catalog)
    report = ApplyReport()
    async with admin_client(kafka, "topics") as admin:
        present = set(await admin.list_topics())
        missing = [s for s in specs if s.full_name(prefix) not in present]
        if missing:
            # A topic created a moment ago (or by a racing apply) may not be listed yet: the
            # broker then answers "already exists", and it is checked for drift like the others.
            present |= await _create(admin, kafka, missing, prefix)
            report.created = [
                s.full_name(prefix) for s in missing if s.full_name(prefix) not in present
            ]
        existing = [s for s in specs if s.full_name(prefix) in present]
        report.existing = [s.full_name(prefix) for s in existing]
        report.drift = await _drift(admin, kafka, existing, prefix)
    return report


async def _create(
    admin: AIOKafkaAdminClient, kafka: KafkaSettings, specs: list[TopicSpec], prefix: str
) -> set[str]:
    """Create the topics (replicated as the settings say); the names that already existed."""
    new = [
        NewTopic(
            s.full_name(prefix),
            s.partitions,
            kafka.replication_factor,
            topic_configs=topic_configs(s, kafka),
        )
        for s in specs
    ]
    response = await admin.create_topics(new)
    already = set()
    for error in response.topic_errors:
        name, code = error[0], error[1]
        message = error[2] if len(error) > 2 else None
        if code == _TOPIC_ALREADY_EXISTS:
            already.add(str(name))
        elif code != 0:
            raise RuntimeError(f"creating topic {name} failed: {code} {message}")
    return already


async def _drift(
    admin: AIOKafkaAdminClient, kafka: KafkaSettings, specs: list[TopicSpec], prefix: str
) -> list[str]:
    drift = []
    counts = await _partition_counts(admin, [s.full_name(prefix) for s in specs])
    for spec in specs:
        name = spec.full_name(prefix)
        if counts.get(name) != spec.partitions:
            drift.append(f"{name}: {counts.get(name)} partitions, catalog says {spec.partitions}")
        actual = await _configs(admin, name)
        for key, wanted in topic_configs(spec, kafka).items():
            if key in actual and actual[key] != wanted:
                drift.append(f"{name}: {key}={actual[key]}, catalog says {wanted}")
    return drift


@dataclass(frozen=True, slots=True)
class PartitionState:
    """One partition: where its log starts and ends, and how far each group has read."""

    topic: str
    partition: int
    log_start: int
    high_water: int
    committed: dict[str, int | None]

    def lag(self, group: str) -> int:
        """Records the group has not read yet (from its committed offset, else the log start)."""
        offset = self.committed.get(group)
        return self.high_water - (offset if offset is not None else self.log_start)


async def _high_waters(
    kafka: KafkaSettings, partitions: list[TopicPartition]
) -> dict[TopicPartition, int]:
    consumer = clients.consumer(kafka, "topics", enable_auto_commit=False, fetch_max_wait_ms=50)
    await consumer.start()
    try:
        consumer.assign(partitions)
        ends = await consumer.end_offsets(partitions)
        starts = await consumer.beginning_offsets(partitions)
        for tp in partitions:
            consumer.seek(tp, max(starts[tp], ends[tp] - 1))
        pending = {tp for tp in partitions if ends[tp] > starts[tp]}
        deadline = asyncio.get_running_loop().time() + 5
        while pending and asyncio.get_running_loop().time() < deadline:
            await consumer.getmany(*pending, timeout_ms=200, max_records=1)
            pending = {tp for tp in pending if consumer.highwater(tp) is None}
        return {
            tp: max(consumer.highwater(tp) or 0, ends[tp] if ends[tp] <= starts[tp] else 0)
            for tp in partitions
        }
    finally:
        await consumer.stop()


async def high_water_marks(kafka: KafkaSettings, topic: str) -> dict[int, int]:
    """Per partition of one topic, the high-water mark (from fetched data)."""
    async with admin_client(kafka, "topics") as admin:
        counts = await _partition_counts(admin, [topic])
    partitions = [TopicPartition(topic, p) for p in range(counts.get(topic, 0))]
    if not partitions:
        return {}
    return {tp.partition: high for tp, high in (await _high_waters(kafka, partitions)).items()}


async def _committed(
    kafka: KafkaSettings, group: str, partitions: list[TopicPartition]
) -> dict[TopicPartition, int | None]:
    consumer = clients.consumer(kafka, "topics", group_id=group, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(partitions)
        return {tp: await consumer.committed(tp) for tp in partitions}
    finally:
        await consumer.stop()


async def describe_topics(
    kafka: KafkaSettings, prefix: str = "", groups: Iterable[str] = ()
) -> list[PartitionState]:
    """Partitions, log start and high-water offsets, and each group's committed offset."""
    async with admin_client(kafka, "topics") as admin:
        present = set(await admin.list_topics())
        names = [s.full_name(prefix) for s in CATALOG if s.full_name(prefix) in present]
        counts = await _partition_counts(admin, names)
    partitions = [TopicPartition(n, p) for n in names for p in range(counts.get(n, 0))]
    if not partitions:
        return []
    high = await _high_waters(kafka, partitions)
    starts_consumer = clients.consumer(kafka, "topics")
    await starts_consumer.start()
    try:
        starts = await starts_consumer.beginning_offsets(partitions)
    finally:
        await starts_consumer.stop()
    committed = {g: await _committed(kafka, g, partitions) for g in groups}
    return [
        PartitionState(
            topic=tp.topic,
            partition=tp.partition,
            log_start=starts[tp],
            high_water=high[tp],
            committed={g: committed[g][tp] for g in committed},
        )
        for tp in partitions
    ]
