"""The store seam: what the rest of keel-stream asks of the ledger and of the run rows.

Two adapters implement it: PostgreSQL (keel_stream.store.postgres, .runs) for every deployment,
and memory (keel_stream.store.memory) for unit tests and embedding. One contract suite
(tests/contract/) runs against both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Protocol

from keel_stream.errors import InvalidRequest
from keel_stream.kernel.commits import PreparedCommit
from keel_stream.kernel.forks import Fork
from keel_stream.kernel.status import RunStatus
from keel_stream.kernel.types import CommitRequest, Event, LeaseToken, Submission

__all__ = [
    "MAX_READ_LIMIT",
    "NO_FAIRNESS",
    "Claim",
    "ClaimFairness",
    "ExternalMarkers",
    "ExternalStatus",
    "Heartbeat",
    "Ledger",
    "Metering",
    "Runs",
    "Settlement",
    "check_one_session",
]

MAX_READ_LIMIT: Final = 1000
"""The most events one read returns."""


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

    async def commit_many(self, requests: Sequence[CommitRequest]) -> list[Submission]:
        """Commit several events of ONE session in order, all or nothing, in one transaction:
        each is what `commit` would have made of it in turn (a retry returns its original
        submission); any refusal raises it and writes none of them. InvalidRequest if the
        requests name more than one session."""
        ...

    async def read_events(
        self, tenant_id: str, session_id: str, after: int = 0, limit: int = 100
    ) -> list[Event]:
        """Committed events with seq > after, in seq order, at most limit."""
        ...

    async def fork(
        self,
        tenant_id: str,
        source_id: str,
        *,
        at_seq: int | None = None,
        session_id: str | None = None,
    ) -> Fork:
        """A new native session of the tenant whose log is a copy of the source's first at_seq
        events (the head when None), checked by the kernel and written in one transaction: kind,
        payload, idempotency key and digest kept, provenance in each copy's metadata, the run
        it owes queued (keel_stream.kernel.forks). SessionNotFound for an unknown source,
        ExternalSession for an external one, InvalidRequest past its head, SessionExists when
        session_id is taken, HistoryTooLong over MAX_HISTORY_EVENTS."""
        ...

    async def head(self, tenant_id: str, session_id: str) -> int:
        """The session's last committed seq (0 for an empty log)."""
        ...


def check_one_session(commits: Sequence[PreparedCommit]) -> None:
    """A batch commits to one session: one lock, one transaction, seqs in the batch's order."""
    keys = {(commit.tenant_id, commit.session_id) for commit in commits}
    if len(keys) > 1:
        raise InvalidRequest(f"commit_many takes the commits of one session, got {len(keys)}")


@dataclass(frozen=True, slots=True)
class Claim:
    """A run this worker now owns, at an epoch no earlier owner can write with."""

    tenant: str
    session: str
    lease: LeaseToken
    attempts: int
    """Attempts against the current budget; on a takeover, those of the attempt that died."""
    max_attempts: int
    read_watermark: int
    taken_over: bool = False
    """The previous owner's lease expired mid-attempt: that attempt must be settled first."""
    cancel_requested: bool = False


@dataclass(frozen=True, slots=True)
class Heartbeat:
    held: bool
    """False once another worker took the run over (or it was settled): stop at once."""
    cancel_requested: bool


@dataclass(frozen=True, slots=True)
class Settlement:
    """How an attempt settles: the policy's status for what it saw, and what it accounted for."""

    status: RunStatus
    read_watermark: int
    accounted_through: int
    """The highest seq the attempt read: an input after it was never presented."""
    fresh_budget: bool
    retry_after_s: float | None = None
    """The model server asked to wait this long (Retry-After on the failure that ended the
    attempt): no worker claims the run again before it has passed, whatever input arrives."""


@dataclass(frozen=True)
class ClaimFairness:
    """How a claim shares the workers' slots between tenants."""

    skip_tenants: frozenset[str] = frozenset()
    """Tenants the claiming worker already runs its share of: none of their runs is claimed."""
    tenant_cap: int = 0
    """At most this many running attempts per tenant across all workers; 0: no cap."""


NO_FAIRNESS: Final = ClaimFairness()


class Runs(Protocol):
    """The run rows, as one worker (its owner name and lease ttl) sees them."""

    async def claim(self, fairness: ClaimFairness = NO_FAIRNESS) -> Claim | None:
        """A pending run (past the wait it settled with), or a running one whose lease expired
        (a takeover); the epoch rises.
        Pending runs of the tenants with the fewest running attempts go first (oldest first
        among equals); `fairness` names tenants to pass over and a per-tenant cap."""
        ...

    async def heartbeat(self, claim: Claim) -> Heartbeat:
        """Extend the lease; held=False once another owner took it."""
        ...

    async def settle(self, claim: Claim, settlement: Settlement) -> RunStatus | None:
        """Settle under the lease: the run's new status, or None if the lease was gone.
        Input committed after `accounted_through` makes the run pending with a fresh budget.
        The run is not claimable before `retry_after_s` has passed (from the settle)."""
        ...

    async def release(self, claim: Claim) -> bool:
        """A draining worker hands its attempt back unfinished: pending, not counted."""
        ...

    async def request_cancel(self, tenant: str, session: str) -> bool:
        """Ask the owning worker to stop the running attempt; False if none is running."""
        ...
