"""Record values of each topic as pydantic models; the JSON Schemas are generated from them."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from keel_stream.kernel.types import Event

__all__ = ["EventRecord", "PartialFrame", "SseFrame"]

EventRecord = Event
"""keel.events.v1: every ledger event, as committed."""


class _Record(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="ignore", validate_by_name=True, serialize_by_alias=True
    )


class SseFrame(_Record):
    """keel.sse.v1: one ledger event rendered as its SSE frame (id = seq, event = kind)."""

    tenant: str
    session: str
    id: int = Field(ge=1, description="The event's seq; the SSE id: field.")
    event: str = Field(description="The event's kind; the SSE event: field.")
    data: dict[str, Any] = Field(description="The event as JSON; the SSE data: field.")


class PartialFrame(_Record):
    """keel.partials.v1: a token-level partial of a model answer; never in the ledger."""

    tenant: str
    session: str
    generation_id: str = Field(alias="generationId")
    index: int = Field(ge=0, description="Position of this partial within its generation.")
    type: Literal["text", "thinking", "toolCall"] = "text"
    delta: str
    emitted_at: datetime = Field(alias="emittedAt")
