"""The wire models of AgentAPI /v1 (the OpenAPI schema is generated from these)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

__all__ = [
    "EVENT_REQUEST_SCHEMA",
    "INPUT_BODY_SCHEMA",
    "Capabilities",
    "CreateSession",
    "EventPage",
    "EventRequest",
    "ForkView",
    "ReadModel",
    "RunQueued",
    "SessionPage",
    "SessionView",
    "SubagentOfView",
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


METADATA_MAX_ENTRIES: Final = 32
METADATA_MAX_KEY: Final = 64
METADATA_MAX_VALUE: Final = 1024


class CreateSession(_Wire):
    """A native session, or with ``backend`` an external one opened at that backend."""

    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(None, min_length=1, max_length=128)
    backend: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$",
        description="An external backend the tenant's configuration declares.",
    )
    fork_of: str | None = Field(
        None,
        alias="forkOf",
        min_length=1,
        max_length=128,
        description="Fork this session of the tenant: the new session's log starts with a copy "
        "of its first atSeq events (no tool or model runs again).",
    )
    at_seq: int | None = Field(
        None,
        alias="atSeq",
        ge=0,
        le=2**63 - 1,
        description="With forkOf: how many of the source's events the fork copies (default: "
        "all of them, up to its head when the fork is made).",
    )
    metadata: dict[str, str] | None = Field(
        None,
        description="Passed to the backend's session.open (external only): at most "
        f"{METADATA_MAX_ENTRIES} entries, keys up to {METADATA_MAX_KEY} and values up to "
        f"{METADATA_MAX_VALUE} characters.",
    )

    @field_validator("metadata")
    @classmethod
    def _bounded(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        # Checked here, not as schema constraints: maxProperties trips the fuzzer's generator.
        if value is None:
            return None
        if len(value) > METADATA_MAX_ENTRIES:
            raise ValueError(f"at most {METADATA_MAX_ENTRIES} metadata entries")
        for key, item in value.items():
            if len(key) > METADATA_MAX_KEY or len(item) > METADATA_MAX_VALUE:
                raise ValueError(
                    f"metadata keys are at most {METADATA_MAX_KEY} characters and values at "
                    f"most {METADATA_MAX_VALUE}"
                )
        return value


class RunView(_Wire):
    status: str | None = None
    attempts: int | None = None
    epoch: int | None = None
    open_decisions: list[str] = Field(
        default_factory=list,
        alias="openDecisions",
        description="Decisions the session waits on (docs/decisions.md).",
    )


class ExternalView(_Wire):
    backend: str | None = None
    ref: str | None = None
    status: str | None = None
    metering: str | None = None


class ForkView(_Wire):
    session: str = Field(description="The session this one forks.")
    at_seq: int = Field(alias="atSeq", description="How many of its events were copied.")


class SubagentOfView(_Wire):
    session: str = Field(description="The parent session.")
    tool_call_id: str = Field(alias="toolCallId", description="The parent's delegate call.")
    depth: int
    root: str = Field(description="The tree's root session.")


class SessionView(_Wire):
    id: str
    last_seq: int = Field(alias="lastSeq")
    state_owner: str = Field(alias="stateOwner")
    created_at: datetime = Field(alias="createdAt")
    run: RunView
    external: ExternalView | None = None
    fork_of: ForkView | None = Field(None, alias="forkOf")
    subagent_of: SubagentOfView | None = Field(None, alias="subagentOf")


class SessionPage(_Wire):
    sessions: list[SessionView]
    next_cursor: str | None = Field(alias="nextCursor")


_USER_MESSAGE_FIELDS: Final[dict[str, Any]] = {
    "text": {"type": "string", "description": "The message."},
    "requestId": {
        "type": "string",
        "minLength": 1,
        "maxLength": 256,
        "description": "The idempotency key; generated (and returned) when absent.",
    },
    "delivery": {
        "type": "string",
        "enum": ["queue", "guide"],
        "description": "queue (absent means queue) or guide; guide degrades to queue when no "
        "attempt is running, and the written event says queue.",
    },
    "selection": {"type": "object", "additionalProperties": True},
    "retryOf": {"type": "integer", "minimum": 0},
}

INPUT_BODY_SCHEMA: Final[dict[str, Any]] = {
    "title": "InputBody",
    "description": "A user.message payload. The kernel validates it (each rule answers 400 with "
    "its own code); any other field is stored exactly as sent, null values included.",
    "type": "object",
    "properties": _USER_MESSAGE_FIELDS,
    "additionalProperties": True,
}


class EventRequest(_Wire):
    """An edge event: the envelope is checked here, the payload by the kernel (rule codes)."""

    model_config = ConfigDict(extra="forbid")
    kind: str
    payload: Annotated[Any, WithJsonSchema(INPUT_BODY_SCHEMA)] = Field(default_factory=dict)
    request_id: str | None = Field(None, alias="requestId", min_length=1, max_length=256)


EVENT_REQUEST_SCHEMA: Final[dict[str, Any]] = EventRequest.model_json_schema(by_alias=True)


class SubmissionView(_Wire):
    created: bool
    request_id: str | None = Field(alias="requestId")
    seq: int
    kind: str
    delivery: str | None = None
    committed_at: datetime = Field(alias="committedAt")
    turn_id: str | None = Field(
        None, alias="turnId", description="External sessions: the backend's turn for this input."
    )


class EventView(_Wire):
    seq: int
    kind: str
    payload: dict[str, Any]
    committed_at: datetime = Field(alias="committedAt")
    metadata: dict[str, Any] | None = Field(
        None, description="Null for most events; a fork's copies carry forkedFrom and origin."
    )


class EventPage(_Wire):
    events: list[EventView]
    next_cursor: int | None = Field(alias="nextCursor")
    """Pass as `after` to read on; null when this page is the end of the log so far."""


class RunQueued(_Wire):
    """What POST /run did: queued a run (202), or not, and why (200)."""

    queued: bool
    reason: Literal["nothing_owed", "already_running"] | None = None
    """Null when queued; nothing_owed: no unanswered input and no owed turn; already_running:
    an attempt is running (it answers what is owed)."""
    status: str | None
    """The run's status after the call (null: the session never had a run)."""


class CancelView(_Wire):
    cancel_requested: bool = Field(alias="cancelRequested")
    turn_id: str | None = Field(None, alias="turnId", description="External sessions only.")
    cancelled: bool | None = Field(
        None, description="External sessions: false when the turn had already ended."
    )


class ReadModel(_Wire):
    last_seq: int = Field(alias="lastSeq")
    state: dict[str, Any]
