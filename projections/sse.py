"""The SSE feed: each ledger event rendered as its SSE frame (id = seq, event = kind).

Its fold only counts: the frames themselves go to keel.sse.v1 as they are applied, and an SSE
reader that misses one heals from the ledger by seq.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson

from keel_stream.projections.base import EventLike
from keel_stream.topics.records import SseFrame

__all__ = ["SSE", "SseProjection", "SseState", "frame_json", "render_frame"]


@dataclass(frozen=True, slots=True)
class SseState:
    frames: int = 0


def _stamp(committed_at: datetime | str) -> str:
    if isinstance(committed_at, str):
        return committed_at
    return committed_at.isoformat().replace("+00:00", "Z")  # as the events topic writes it


def _data(event: EventLike, committed_at: datetime | str) -> dict[str, Any]:
    return {
        "tenant": event.tenant,
        "session": event.session,
        "seq": event.seq,
        "kind": event.kind,
        "payload": dict(event.payload),
        "committedAt": _stamp(committed_at),
    }


def render_frame(event: EventLike, committed_at: datetime | str) -> SseFrame:
    """The frame of one event; `data` is the event exactly as keel.events.v1 carries it."""
    return SseFrame(
        tenant=event.tenant,
        session=event.session,
        id=event.seq,
        event=event.kind,
        data=_data(event, committed_at),
    )


def frame_json(event: EventLike, committed_at: datetime | str) -> bytes:
    """`render_frame(event, committed_at).model_dump_json()`, without building the model: the
    live projector renders every event."""
    frame = {
        "tenant": event.tenant,
        "session": event.session,
        "id": event.seq,
        "event": event.kind,
        "data": _data(event, committed_at),
    }
    return orjson.dumps(frame)


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
