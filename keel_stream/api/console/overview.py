"""The operations page's figures: relay backlog, projection generations and their lag per
partition, topic offsets, workers and the tenant's leases; gathered on request."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Final

from keel_stream.errors import BrokerError
from keel_stream.kafka.admin import high_water_marks
from keel_stream.kafka.errors import kafka_translated
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.store.ops import LeaseRow, OpsReader, WorkerRow
from keel_stream.store.outbox import Backlog
from keel_stream.store.projection_state import ProjectionStore
from keel_stream.topics.catalog import CATALOG, EVENTS

__all__ = ["GenerationRow", "Overview", "PartitionLag", "TopicRow", "gather"]

BROKER_WAIT_S: Final = 5.0
"""How long the page waits for the broker's offsets before it shows them as unknown."""


@dataclass(frozen=True, slots=True)
class PartitionLag:
    partition: int
    offset: int
    high: int | None
    lag: int | None


@dataclass(frozen=True, slots=True)
class GenerationRow:
    projection: str
    generation: int
    status: str
    sessions: int
    parked: int
    partitions: list[PartitionLag]

    @property
    def lag(self) -> int | None:
        lags = [p.lag for p in self.partitions]
        return None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags)


@dataclass(frozen=True, slots=True)
class TopicRow:
    topic: str
    highs: dict[int, int]

    @property
    def total(self) -> int:
        return sum(self.highs.values())


@dataclass(frozen=True, slots=True)
class Overview:
    backlog: Backlog
    workers: list[WorkerRow]
    leases: list[LeaseRow]
    generations: list[GenerationRow]
    topics: list[TopicRow] = field(default_factory=list)
    broker: str | None = None
    """Why the broker's offsets are missing (no broker configured, or it did not answer)."""


async def _topic_highs(kafka: KafkaSettings, prefix: str) -> list[TopicRow]:
    rows = []
    async with kafka_translated("read topic offsets"):
        for spec in CATALOG:
            name = spec.full_name(prefix)
            rows.append(TopicRow(name, await high_water_marks(kafka, name)))
    return rows


async def _topics(kafka: KafkaSettings | None, prefix: str) -> tuple[list[TopicRow], str | None]:
    if kafka is None:
        return [], "no broker is configured (KEEL_KAFKA_BOOTSTRAP)"
    try:
        return await asyncio.wait_for(_topic_highs(kafka, prefix), BROKER_WAIT_S), None
    except (BrokerError, TimeoutError) as exc:
        return [], f"the broker did not answer: {exc}"


async def _generations(
    store: ProjectionStore, highs: dict[int, int] | None, topic: str
) -> list[GenerationRow]:
    parked = await store.parked().counts()
    rows = []
    for g in await store.generations():
        offsets = await store.offsets(g.projection, g.generation, topic)
        partitions = sorted(set(offsets) | set(highs or {}))
        lags = [
            PartitionLag(
                partition=p,
                offset=offsets.get(p, 0),
                high=None if highs is None else highs.get(p, 0),
                lag=None if highs is None else max(0, highs.get(p, 0) - offsets.get(p, 0)),
            )
            for p in partitions
        ]
        rows.append(
            GenerationRow(
                g.projection,
                g.generation,
                g.status,
                g.sessions,
                parked.get((g.projection, g.generation), 0),
                lags,
            )
        )
    return rows


async def gather(
    reader: OpsReader,
    store: ProjectionStore,
    tenant: str,
    kafka: KafkaSettings | None,
    prefix: str,
) -> Overview:
    topics, broker = await _topics(kafka, prefix)
    events = EVENTS.full_name(prefix)
    highs = next((t.highs for t in topics if t.topic == events), None)
    return Overview(
        backlog=await reader.backlog(),
        workers=await reader.workers(),
        leases=await reader.leases(tenant),
        generations=await _generations(store, highs, events),
        topics=topics,
        broker=broker,
    )
