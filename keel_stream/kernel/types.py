"""Value types shared by every layer: what a commit asks for and what the ledger answers."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field

__all__ = ["CommitRequest", "Event", "EventLike", "LeaseToken", "Submission"]


class EventLike(Protocol):
    """The fields of a committed event that folds and accounting read. `Event` is the one event
    type; this protocol lets a fold also take a lighter record decoded straight off a topic."""

    @property
    def tenant(self) -> str: ...
    @property
    def session(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def payload(self) -> Mapping[str, Any]: ...


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


class Event(BaseModel):
    """A committed event as readers see it; also the record value on keel.events.v1.

    Unknown fields are ignored when reading, so consumers keep working as the record grows
    (a .v1 topic only ever gains fields).
    """

    model_config = ConfigDict(
        frozen=True, extra="ignore", validate_by_name=True, serialize_by_alias=True
    )

    tenant: str = Field(description="The tenant id.")
    session: str = Field(description="The session id, unique within its tenant.")
    seq: int = Field(ge=1, description="Dense per-session sequence number: 1, 2, 3, ...")
    kind: str = Field(
        description="One of: user.message, assistant.message, tool.result, compaction, "
        "run.finished, run.started, run.failed, external.event."
    )
    payload: dict[str, Any] = Field(description="The payload as committed.")
    committed_at: datetime = Field(alias="committedAt", description="Commit time (UTC).")
    metadata: dict[str, Any] | None = Field(
        None,
        description="What the ledger records about the event beside its payload; null for most. "
        "A fork's copies carry forkedFrom {session, seq, committedAt} and origin {session, seq}.",
    )

    @property
    def key(self) -> tuple[str, str]:
        """(tenant, session): the per-session ordering key."""
        return (self.tenant, self.session)

    @classmethod
    def trusted(
        cls,
        tenant: str,
        session: str,
        seq: int,
        kind: str,
        payload: dict[str, Any],
        committed_at: datetime,
        metadata: dict[str, Any] | None = None,
    ) -> Event:
        """An event from a source that already validated it (a ledger row, a record the relay
        wrote), built without validating again: replays decode millions of them."""
        return cls.model_construct(
            tenant=tenant,
            session=session,
            seq=seq,
            kind=kind,
            payload=payload,
            committed_at=committed_at,
            metadata=metadata,
        )

    @classmethod
    def from_record(cls, value: bytes) -> Event:
        """A keel.events.v1 record value, decoded once (trusted: the relay wrote it)."""
        d = orjson.loads(value)
        return cls.trusted(
            d["tenant"],
            d["session"],
            d["seq"],
            d["kind"],
            d["payload"],
            datetime.fromisoformat(d["committedAt"]),
            d.get("metadata"),
        )
