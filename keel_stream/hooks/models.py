"""The wire models of /v1/hooks (the OpenAPI schema is generated from these)."""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from keel_stream.store.hooks import Attempt, Delivery, Subscription

__all__ = [
    "MAX_URL_CHARS",
    "AttemptView",
    "CreateHook",
    "DeliveryDetail",
    "DeliveryPage",
    "DeliveryView",
    "HookCreated",
    "HookList",
    "HookView",
    "ReplayBody",
    "ReplayView",
    "SessionFilter",
    "attempt_view",
    "delivery_view",
    "hook_view",
]

MAX_URL_CHARS: Final = 2048
MAX_FILTER_SESSIONS: Final = 100
_SESSION_ID: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"


class _Wire(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)


class SessionFilter(_Wire):
    """Only these sessions (`ids`), or only sessions whose id starts with `prefix` (or both)."""

    model_config = ConfigDict(extra="forbid")
    ids: list[str] | None = Field(
        None,
        min_length=1,
        max_length=MAX_FILTER_SESSIONS,
        json_schema_extra={"items": {"pattern": _SESSION_ID}},
    )
    prefix: str | None = Field(None, pattern=r"^[A-Za-z0-9._:@-]{1,128}$")


class CreateHook(_Wire):
    model_config = ConfigDict(extra="forbid")
    url: str = Field(min_length=1, max_length=MAX_URL_CHARS)
    events: list[str] = Field(min_length=1, max_length=16)
    session_filter: SessionFilter | None = Field(None, alias="sessionFilter")


class HookView(_Wire):
    id: str
    url: str
    events: list[str]
    session_filter: SessionFilter | None = Field(None, alias="sessionFilter")
    state: Literal["active", "disabled"]
    disabled_reason: str | None = Field(None, alias="disabledReason")
    created_at: datetime = Field(alias="createdAt")
    rotated_at: datetime | None = Field(None, alias="rotatedAt")


class HookCreated(HookView):
    secret: str = Field(description="The signing secret (whsec_…): shown once, never again.")


class HookList(_Wire):
    hooks: list[HookView]


class DeliveryView(_Wire):
    id: int
    webhook_id: str = Field(alias="webhookId")
    type: str
    session: str
    seq: int
    decision_id: str | None = Field(None, alias="decisionId")
    status: Literal["pending", "delivered", "dead"]
    attempts: int
    next_attempt_at: datetime | None = Field(None, alias="nextAttemptAt")
    last_status: int | None = Field(None, alias="lastStatus")
    last_error: str | None = Field(None, alias="lastError")
    created_at: datetime = Field(alias="createdAt")
    updated_at: datetime = Field(alias="updatedAt")
    delivered_at: datetime | None = Field(None, alias="deliveredAt")


class AttemptView(_Wire):
    attempt: int
    at: datetime
    status: int | None
    error: str | None
    duration_ms: int = Field(alias="durationMs")


class DeliveryDetail(DeliveryView):
    attempt_log: list[AttemptView] = Field(alias="attemptLog")


class DeliveryPage(_Wire):
    deliveries: list[DeliveryView]
    next_cursor: str | None = Field(None, alias="nextCursor")


class ReplayBody(_Wire):
    model_config = ConfigDict(extra="forbid")
    from_seq: int | None = Field(None, alias="fromSeq", ge=1)
    from_time: AwareDatetime | None = Field(None, alias="fromTime")
    session: str | None = Field(None, pattern=_SESSION_ID)


class ReplayView(_Wire):
    queued: int
    sessions: int
    events: int


def hook_view(subscription: Subscription) -> HookView:
    session_filter = None
    if subscription.session_ids is not None or subscription.session_prefix is not None:
        session_filter = SessionFilter(
            ids=None if subscription.session_ids is None else list(subscription.session_ids),
            prefix=subscription.session_prefix,
        )
    return HookView(
        id=subscription.id,
        url=subscription.url,
        events=list(subscription.events),
        session_filter=session_filter,
        state="disabled" if subscription.state == "disabled" else "active",
        disabled_reason=subscription.disabled_reason,
        created_at=subscription.created_at,
        rotated_at=subscription.rotated_at,
    )


def delivery_view(delivery: Delivery) -> DeliveryView:
    return DeliveryView.model_validate(_delivery_fields(delivery))


def _delivery_fields(delivery: Delivery) -> dict[str, object]:
    return {
        "id": delivery.id,
        "webhook_id": delivery.webhook_id,
        "type": delivery.hook,
        "session": delivery.session,
        "seq": delivery.seq,
        "decision_id": delivery.decision_id or None,
        "status": delivery.status,
        "attempts": delivery.attempts,
        "next_attempt_at": delivery.next_attempt_at if delivery.status == "pending" else None,
        "last_status": delivery.last_status,
        "last_error": delivery.last_error,
        "created_at": delivery.created_at,
        "updated_at": delivery.updated_at,
        "delivered_at": delivery.delivered_at,
    }


def attempt_view(attempt: Attempt) -> AttemptView:
    return AttemptView(
        attempt=attempt.attempt,
        at=attempt.attempted_at,
        status=attempt.status_code,
        error=attempt.error,
        duration_ms=attempt.duration_ms,
    )


def delivery_detail(delivery: Delivery, attempts: list[Attempt]) -> DeliveryDetail:
    fields = _delivery_fields(delivery)
    fields["attempt_log"] = [attempt_view(a) for a in attempts]
    return DeliveryDetail.model_validate(fields)
