"""`keel-stream projections status`: generations, offsets and lag of every projection."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from keel_stream.store.projection_state import ProjectionStore
from keel_stream.topics.admin import high_water_marks
from keel_stream.topics.catalog import EVENTS

__all__ = ["GenerationStatus", "projection_status"]


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


async def projection_status(
    store: ProjectionStore, bootstrap: str | None, topic_prefix: str = ""
) -> list[GenerationStatus]:
    topic = EVENTS.full_name(topic_prefix)
    highs = await high_water_marks(bootstrap, topic) if bootstrap else None
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
            )
        )
    return result
