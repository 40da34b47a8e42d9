"""The SSE feed: each ledger event rendered as its SSE frame (id = seq, event = kind).

Its fold only counts: the frames themselves go to keel.sse.v1 as they are applied, and an SSE
reader that misses one heals from the ledger by seq.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from keel_stream.projections.base import EventLike
from keel_stream.topics.records import SseFrame

__all__ = ["SSE", "SseProjection", "SseState", "render_frame"]


@dataclass(frozen=True, slots=True)
class SseState:
    frames: int = 0


def render_frame(event: EventLike, committed_at: datetime | str) -> SseFrame:
    """The frame of one event; `data` is the event exactly as keel.events.v1 carries it."""
    if isinstance(committed_at, str):
        stamp = committed_at
    else:  # as the events topic writes it (UTC, with Z)
        stamp = committed_at.isoformat().replace("+00:00", "Z")
    return SseFrame(
        tenant=event.tenant,
        session=event.session,
        id=event.seq,
        event=event.kind,
        data={
            "tenant": event.tenant,
            "session": event.session,
            "seq": event.seq,
            "kind": event.kind,
            "payload": dict(event.payload),
            "committedAt": stamp,
        },
    )


class SseProjection:
    name = "sse"

    def initial(self) -> SseState:
        return SseState()

    def apply(self, state: SseState, event: EventLike) -> SseState:
        return SseState(frames=state.frames + 1)

    def apply_many(self, state: SseState, events: Sequence[EventLike]) -> SseState:
        return SseState(frames=state.frames + len(events))

    def dump(self, state: SseState) -> dict[str, Any]:
        return {"frames": state.frames}

    def load(self, data: Mapping[str, Any]) -> SseState:
        return SseState(frames=int(data.get("frames", 0)))


SSE: Final = SseProjection()
