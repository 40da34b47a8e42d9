"""Value types shared by every layer: what a commit asks for and what the ledger answers."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CommitRequest", "Event", "LeaseToken", "Submission"]


class _Frozen(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="forbid", validate_by_name=True, serialize_by_alias=True
    )


class LeaseToken(_Frozen):
    """The fence of owner-scoped commits: who holds the session's lease, at which epoch."""

    owner: str = Field(min_length=1, max_length=200)
    epoch: int = Field(ge=1)


class CommitRequest(_Frozen):
    """One fact a caller wants in the log."""

    tenant_id: str
    session_id: str
    kind: str
    payload: dict[str, Any]
    key: str | None = None
    """The idempotency key; may instead be given as the kind's key field in the payload."""
    lease: LeaseToken | None = None


class Submission(_Frozen):
    """What a commit returns: the seq the fact holds, and whether this call created it."""

    created: bool
    seq: int
    kind: str
    key: str | None = None
    committed_at: datetime = Field(alias="committedAt")


class Event(_Frozen):
    """A committed event as readers see it; also the record value on keel.events.v1."""

    tenant: str
    session: str
    seq: int = Field(ge=1)
    kind: str
    payload: dict[str, Any]
    committed_at: datetime = Field(alias="committedAt")
