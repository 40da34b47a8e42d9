"""The wire models of AgentAPI /v1 (the OpenAPI schema is generated from these)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "Capabilities",
    "CreateSession",
    "EventPage",
    "EventRequest",
    "InputRequest",
    "ReadModel",
    "RunQueued",
    "SessionPage",
    "SessionView",
    "SubmissionView",
]


class _Wire(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)


class Capabilities(_Wire):
    api_version: str = Field("v1", alias="apiVersion")
    service_version: str = Field(alias="serviceVersion")
    features: dict[str, bool]
    limits: dict[str, int]
    hooks: list[str]


class CreateSession(_Wire):
    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(None, min_length=1, max_length=128)


class RunView(_Wire):
    status: str | None = None
    attempts: int | None = None
    epoch: int | None = None


class ExternalView(_Wire):
    backend: str | None = None
    ref: str | None = None
    status: str | None = None
    metering: str | None = None


class SessionView(_Wire):
    id: str
    last_seq: int = Field(alias="lastSeq")
    state_owner: str = Field(alias="stateOwner")
    created_at: datetime = Field(alias="createdAt")
    run: RunView
    external: ExternalView | None = None


class SessionPage(_Wire):
    sessions: list[SessionView]
    next_cursor: str | None = Field(alias="nextCursor")


class InputRequest(_Wire):
    """A user message. Unknown fields are kept in the payload (metadata)."""

    model_config = ConfigDict(extra="allow")
    text: str | None = None
    request_id: str | None = Field(None, alias="requestId", min_length=1, max_length=256)
    delivery: Literal["queue", "guide"] | None = None


class EventRequest(_Wire):
    model_config = ConfigDict(extra="forbid")
    kind: str
    payload: dict[str, Any] = Field(default_factory=dict)
    request_id: str | None = Field(None, alias="requestId", min_length=1, max_length=256)


class SubmissionView(_Wire):
    created: bool
    request_id: str | None = Field(alias="requestId")
    seq: int
    kind: str
    delivery: str | None = None
    committed_at: datetime = Field(alias="committedAt")


class EventView(_Wire):
    seq: int
    kind: str
    payload: dict[str, Any]
    committed_at: datetime = Field(alias="committedAt")


class EventPage(_Wire):
    events: list[EventView]
    next_cursor: int | None = Field(alias="nextCursor")
    """Pass as `after` to read on; null when this page is the end of the log so far."""


class RunQueued(_Wire):
    status: str


class CancelView(_Wire):
    cancel_requested: bool = Field(alias="cancelRequested")


class ReadModel(_Wire):
    last_seq: int = Field(alias="lastSeq")
    state: dict[str, Any]
