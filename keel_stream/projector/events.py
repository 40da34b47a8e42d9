"""Where an event came from on the source topic (the event itself is the kernel's Event)."""

from __future__ import annotations

from dataclasses import dataclass

from keel_stream.kernel.types import Event

__all__ = ["SourceRecord"]


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """An event and where it came from on the source topic."""

    event: Event
    partition: int
    offset: int
