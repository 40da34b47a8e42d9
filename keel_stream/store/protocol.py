"""The store seam: what the rest of keel-stream asks of the ledger."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from keel_stream.kernel.types import CommitRequest, Event, Submission

__all__ = ["ExternalMarkers", "ExternalStatus", "Ledger", "Metering"]


class ExternalStatus(StrEnum):
    """Lifecycle of an external session; backend-unavailable is a queryable terminal state."""

    ACTIVE = "active"
    CLOSED = "closed"
    BACKEND_UNAVAILABLE = "backend-unavailable"


class Metering(StrEnum):
    """Who reports usage of an external session."""

    EXTERNAL = "external"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class ExternalMarkers:
    """The markers that make a session external: its state is owned by a backend."""

    backend: str
    ref: str | None = None
    status: ExternalStatus = ExternalStatus.ACTIVE
    metering: Metering = Metering.EXTERNAL


class Ledger(Protocol):
    """The append-only event ledger."""

    async def create_tenant(self, tenant_id: str, name: str = "") -> None:
        """Register a tenant; TenantExists if the id is taken."""
        ...

    async def create_session(
        self, tenant_id: str, session_id: str | None = None, external: ExternalMarkers | None = None
    ) -> str:
        """Open a session (native unless markers are given) and return its id."""
        ...

    async def commit(self, request: CommitRequest) -> Submission:
        """Validate and append one event, or return the original submission of a retry."""
        ...

    async def read_events(
        self, tenant_id: str, session_id: str, after: int = 0, limit: int = 100
    ) -> list[Event]:
        """Committed events with seq > after, in seq order, at most limit."""
        ...

    async def head(self, tenant_id: str, session_id: str) -> int:
        """The session's last committed seq (0 for an empty log)."""
        ...
