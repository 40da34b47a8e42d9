"""`keel-stream projections status`: generations, offsets, lag and parked sessions of every
projection; and the parked sessions themselves, to look at and to try again."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from keel_stream.kafka.admin import high_water_marks
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.store.projection_parked import ParkedSession
from keel_stream.store.projection_state import ProjectionStore
from keel_stream.topics.catalog import EVENTS

__all__ = [
    "GenerationStatus",
    "ParkedSession",
    "dead_records",
    "parked_sessions",
    "projection_status",
    "unpark",
]


@dataclass(frozen=True, slots=True)
class GenerationStatus:
    projection: str
    generation: int
    status: str
    sessions: int
    sessions_behind_ledger: int
    offsets: dict[int, int]
    lag: int | None
    """Records on the source topic past the stored offsets (None if the broker is unknown)."""
    live_at: datetime | None
    parked: int = 0
    """Sessions parked: the generation could not apply them (see parked_sessions)."""


async def projection_status(
    store: ProjectionStore, kafka: KafkaSettings | None, topic_prefix: str = ""
) -> list[GenerationStatus]:
    topic = EVENTS.full_name(topic_prefix)
    highs = await high_water_marks(kafka, topic) if kafka is not None else None
    parked = await store.parked().counts()
    result = []
    for g in await store.generations():
        offsets = await store.offsets(g.projection, g.generation, topic)
        behind = await store.sessions_behind_ledger(g.projection, g.generation)
        lag = (
            sum(max(0, high - offsets.get(p, 0)) for p, high in highs.items())
            if highs is not None
            else None
        )
        result.append(
            GenerationStatus(
                projection=g.projection,
                generation=g.generation,
                status=g.status,
                sessions=g.sessions,
                sessions_behind_ledger=behind,
                offsets=offsets,
                lag=lag,
                live_at=g.live_at,
                parked=parked.get((g.projection, g.generation), 0),
            )
        )
    return result


async def parked_sessions(
    store: ProjectionStore, projection: str | None = None, limit: int = 1000
) -> list[ParkedSession]:
    """The parked sessions (all, or one projection's), the longest parked first: where each
    stopped (seq), why (error), how often it was tried and whether another try is due."""
    return await store.parked().listing(projection, limit)


async def unpark(
    store: ProjectionStore,
    projection: str | None = None,
    tenant: str | None = None,
    session: str | None = None,
) -> int:
    """Try parked sessions again now (all, or those matching): their entries go, and the
    projector's reconcile applies them from the ledger on its next tick (parking them again if
    they still fail). How many entries went."""
    return await store.parked().unpark(projection, tenant, session)


async def dead_records(store: ProjectionStore, topic_prefix: str = "") -> int:
    """Records of the source topic the projector passed over because they are not events."""
    return await store.parked().dead_records(EVENTS.full_name(topic_prefix))
