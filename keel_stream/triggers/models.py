"""The wire models of /v1/triggers; the stored definition is the validated request itself."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

from keel_stream.errors import InvalidTrigger
from keel_stream.kernel.limits import MAX_EVENT_BYTES
from keel_stream.triggers.policy import expansion_bound
from keel_stream.triggers.schedule import Schedule, parse_every
from keel_stream.triggers.signatures import MAX_DELIVERY_ID

__all__ = [
    "MAX_INGEST_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_TEXT_CHARS",
    "CreateTrigger",
    "FiringPage",
    "FiringView",
    "IngestAnswer",
    "InputSpec",
    "Overlap",
    "ScheduleSpec",
    "TargetSpec",
    "TriggerCreated",
    "TriggerList",
    "TriggerView",
    "WebhookSpec",
    "check_template",
    "schedule_of",
]

MAX_TEXT_CHARS: Final = 16_384
MAX_INGEST_BYTES: Final = 256 * 1024
"""An inbound webhook's body, at most."""
MAX_MESSAGE_BYTES: Final = MAX_EVENT_BYTES - 16 * 1024
"""What a message's text may take serialized: the event limit, less room for its other fields.
A template is checked at creation in characters (each at least one byte), a rendered message at
delivery in bytes."""
_WIDTHS: Final = {"trigger": 19, "nominalTime": 40}
"""The longest value of each placeholder (`tr_` + 16 hex; an ISO instant with an offset)."""
_WEBHOOK_WIDTHS: Final = {**_WIDTHS, "deliveryId": MAX_DELIVERY_ID, "body": MAX_INGEST_BYTES}
_SESSION_ID: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
Overlap = Literal["skip", "buffer_one", "queue", "guide", "cancel_other"]


class _Wire(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True, extra="forbid")


class ScheduleSpec(_Wire):
    """`cron` (five fields, in `timezone`) or `every` (`30s`, `5m`, `1h`, `1d`): exactly one."""

    cron: str | None = Field(None, max_length=200)
    every: str | None = Field(None, max_length=16)
    timezone: str = Field("UTC", max_length=64)
    jitter_s: int = Field(0, alias="jitterS", ge=0, le=3600)
    catchup_window_s: int = Field(60, alias="catchupWindowS", ge=1, le=7 * 86400)
    max_fires: int | None = Field(None, alias="maxFires", ge=1, le=10**9)
    start_at: AwareDatetime | None = Field(None, alias="startAt")
    end_at: AwareDatetime | None = Field(None, alias="endAt")


class TargetSpec(_Wire):
    """`{"session": id}` (an existing session of the tenant) or `{"newSession": true}`."""

    session: str | None = Field(None, pattern=_SESSION_ID)
    new_session: bool = Field(False, alias="newSession")

    @model_validator(mode="after")
    def _one(self) -> TargetSpec:
        if (self.session is None) == (not self.new_session):
            raise ValueError("target is {session: id} or {newSession: true}")
        return self


class InputSpec(_Wire):
    """The user.message text; `{{trigger}}`, `{{nominalTime}}` and, for webhooks, `{{body}}`
    and `{{deliveryId}}` are replaced."""

    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    delivery: Literal["queue", "guide"] = "queue"


class WebhookSpec(_Wire):
    scheme: Literal["standard", "github"] = "standard"


class CreateTrigger(_Wire):
    kind: Literal["schedule", "webhook"]
    name: str | None = Field(None, max_length=200)
    schedule: ScheduleSpec | None = None
    webhook: WebhookSpec | None = None
    target: TargetSpec
    input: InputSpec
    overlap: Overlap = "skip"

    @model_validator(mode="after")
    def _shape(self) -> CreateTrigger:
        if self.kind == "schedule" and (self.schedule is None or self.webhook is not None):
            raise ValueError("a schedule trigger has `schedule` and no `webhook`")
        if self.kind == "webhook" and self.schedule is not None:
            raise ValueError("a webhook trigger has no `schedule`")
        if self.kind == "webhook" and self.webhook is None:
            self.webhook = WebhookSpec()
        return self


def check_template(spec: CreateTrigger) -> None:
    """InvalidTrigger when the input template could expand past one event: each placeholder
    counted at its longest value (a webhook's `{{body}}` at the largest body taken)."""
    widths = _WEBHOOK_WIDTHS if spec.kind == "webhook" else _WIDTHS
    bound = expansion_bound(spec.input.text, widths)
    if bound > MAX_MESSAGE_BYTES:
        raise InvalidTrigger(
            f"input.text may expand to {bound} characters; a message holds at most "
            f"{MAX_MESSAGE_BYTES} (a webhook's {{{{body}}}} counts {MAX_INGEST_BYTES})"
        )


def schedule_of(spec: ScheduleSpec) -> Schedule:
    """The pure schedule of a spec; InvalidTrigger when it breaks a rule."""
    if (spec.cron is None) == (spec.every is None):
        raise InvalidTrigger("a schedule has exactly one of cron and every")
    return Schedule(
        cron=spec.cron,
        every_s=None if spec.every is None else parse_every(spec.every),
        timezone=spec.timezone,
        start_at=spec.start_at,
        end_at=spec.end_at,
    )


class TriggerView(_Wire):
    id: str
    kind: Literal["schedule", "webhook"]
    name: str | None = None
    schedule: ScheduleSpec | None = None
    webhook: WebhookSpec | None = None
    target: TargetSpec
    input: InputSpec
    overlap: Overlap
    state: Literal["active", "paused", "completed"]
    fires: int
    next_fire_at: datetime | None = Field(None, alias="nextFireAt")
    next_nominal_at: datetime | None = Field(None, alias="nextNominalTime")
    created_at: datetime = Field(alias="createdAt")
    ingest_path: str | None = Field(None, alias="ingestPath")


class TriggerCreated(TriggerView):
    secret: str | None = Field(
        None, description="A webhook trigger's signing secret: shown once, never again."
    )


class TriggerList(_Wire):
    triggers: list[TriggerView]
    next_cursor: str | None = Field(None, alias="nextCursor")


class FiringView(_Wire):
    id: int
    key: str
    nominal_time: datetime = Field(alias="nominalTime")
    actual_time: datetime = Field(alias="actualTime")
    decision: str
    reason: str
    delivery: str | None = None
    session: str | None = None
    outcome: str | None = None
    seq: int | None = None
    created: bool | None = None
    error: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)
    recorded_at: datetime = Field(alias="recordedAt")
    finished_at: datetime | None = Field(None, alias="finishedAt")


class FiringPage(_Wire):
    firings: list[FiringView]
    next_cursor: str | None = Field(None, alias="nextCursor")


class IngestAnswer(_Wire):
    seq: int | None
    created: bool
    decision: str
    session: str | None = None
