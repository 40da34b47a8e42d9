"""The in-memory ledger and run rows (keel_stream.store.memory.MemoryStore is the backend that
hands them out with the other memory repositories).

It keeps the PostgreSQL adapter's rules (tests/contract/ runs one suite against both): the class
gate, fences, one key per session, dense seq, guide degrade, input making a run owed, claims with
takeover, leases, settling. Every operation runs to completion without awaiting, which is what
serialises it on one event loop: it is not shared between processes and keeps nothing on disk.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from keel_stream.errors import (
    InvalidPage,
    InvalidPayload,
    LeaseFenced,
    PayloadRule,
    SessionExists,
    SessionNotFound,
    TenantExists,
    TenantNotFound,
)
from keel_stream.kernel.commits import (
    PreparedCommit,
    SessionState,
    check_class_gate,
    check_identifier,
    prepare,
    replayed,
)
from keel_stream.kernel.delivery import Delivery, with_effective_delivery
from keel_stream.kernel.forks import Fork, ForkChecker, check_fork_point, copy_metadata
from keel_stream.kernel.status import RunStatus
from keel_stream.kernel.types import CommitRequest, Event, LeaseToken, Submission
from keel_stream.kernel.validation import tool_call_blocks
from keel_stream.kernel.vocabulary import Kind
from keel_stream.store.protocol import (
    MAX_READ_LIMIT,
    NO_FAIRNESS,
    Claim,
    ClaimFairness,
    ExternalMarkers,
    ExternalStatus,
    Heartbeat,
    Settlement,
    check_one_session,
)

__all__ = ["MemoryLedger", "MemoryRuns"]

_PENDING: Final = RunStatus.PENDING.value
_RUNNING: Final = RunStatus.RUNNING.value
_ENDED: Final = frozenset({RunStatus.DONE.value, RunStatus.FAILED.value})


@dataclass
class _Run:
    status: str = _PENDING
    attempts: int = 0
    max_attempts: int = 3
    lease_owner: str | None = None
    lease_epoch: int = 0
    lease_expires_at: float | None = None
    last_input_seq: int = 0
    read_watermark: int = 0
    cancel_requested: bool = False
    not_before: float | None = None
    updated: int = 0


@dataclass
class _Session:
    external: ExternalMarkers | None
    events: list[Event] = field(default_factory=list)
    keys: dict[str, tuple[Event, str]] = field(default_factory=dict)
    """dedupe key -> (the event, the digest of the payload as requested)."""
    run: _Run | None = None
    fork_of: tuple[str, int] | None = None
    """(source session, atSeq) of a fork."""


class MemoryLedger:
    """Implements keel_stream.store.protocol.Ledger; `runs()` gives the Runs of one worker."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tenants: set[str] = set()
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._ticks = 0
        self.commit_listeners: list[Callable[[Event], None]] = []
        self.cancel_listeners: list[Callable[[str, str], None]] = []

    def runs(self, owner: str, lease_ttl_s: float) -> MemoryRuns:
        return MemoryRuns(self, owner, lease_ttl_s)

    def now(self) -> float:
        return self._clock()

    def has_tenant(self, tenant: str) -> bool:
        return tenant in self._tenants

    def tick(self) -> int:
        """A strictly increasing stamp: the claim order of runs (updated_at in PostgreSQL)."""
        self._ticks += 1
        return self._ticks

    async def create_tenant(self, tenant_id: str, name: str = "") -> None:
        check_identifier(tenant_id, "tenant")
        if tenant_id in self._tenants:
            raise TenantExists(f"tenant {tenant_id!r} already exists")
        self._tenants.add(tenant_id)

    async def create_session(
        self, tenant_id: str, session_id: str | None = None, external: ExternalMarkers | None = None
    ) -> str:
        check_identifier(tenant_id, "tenant")
        session_id = check_identifier(session_id or str(uuid.uuid4()), "session")
        if tenant_id not in self._tenants:
            raise TenantNotFound(f"tenant {tenant_id!r} does not exist")
        if (tenant_id, session_id) in self._sessions:
            raise SessionExists(f"session {session_id!r} already exists")
        self._sessions[(tenant_id, session_id)] = _Session(external)
        return session_id

    def session_keys(self) -> list[tuple[str, str]]:
        """Every session's (tenant, session), in key order (the sessions table's order)."""
        return sorted(self._sessions)

    def find(self, tenant_id: str, session_id: str) -> _Session | None:
        return self._sessions.get((tenant_id, session_id))

    def session(self, tenant_id: str, session_id: str) -> _Session:
        check_identifier(tenant_id, "tenant")
        check_identifier(session_id, "session")
        found = self._sessions.get((tenant_id, session_id))
        if found is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        return found

    async def commit(self, request: CommitRequest) -> Submission:
        return (await self.commit_many([request]))[0]

    async def commit_many(self, requests: Sequence[CommitRequest]) -> list[Submission]:
        commits = [prepare(request) for request in requests]
        if not commits:
            return []
        check_one_session(commits)
        session = self.session(commits[0].tenant_id, commits[0].session_id)
        # All or nothing, as the PostgreSQL transaction: undo on a refusal, listeners after.
        count = len(session.events)
        run = dataclasses.replace(session.run) if session.run is not None else None
        try:
            submissions = [self._apply(session, commit) for commit in commits]
        except BaseException:
            del session.events[count:]
            for key in [k for k, (event, _) in session.keys.items() if event.seq > count]:
                del session.keys[key]
            session.run = run
            raise
        for event in session.events[count:]:
            for listener in self.commit_listeners:
                listener(event)
        return submissions

    def _apply(self, session: _Session, commit: PreparedCommit) -> Submission:
        """One commit under the session's rules (keel_commit of migration 0053, in order)."""
        external = session.external
        closed = external is not None and external.status == ExternalStatus.CLOSED
        if check_class_gate(commit, SessionState.of(external=external is not None, closed=closed)):
            run, lease = session.run, commit.lease
            if run is None or lease is None or not _holds(run, lease):
                raise LeaseFenced(f"lease {lease} does not hold session {commit.session_id!r}")
        if commit.dedupe_key is not None and commit.dedupe_key in session.keys:
            original, digest = session.keys[commit.dedupe_key]
            return replayed(commit, original.kind, digest, original.seq, original.committed_at)
        payload = commit.payload
        if commit.kind is Kind.USER_MESSAGE and payload.get("delivery") == Delivery.GUIDE:
            payload = with_effective_delivery(payload, self._attempt_active(session))
        if commit.kind is Kind.TOOL_RESULT and not _call_exists(session, commit.key):
            raise InvalidPayload(
                PayloadRule.TOOL_CALL_NOT_FOUND,
                f"no committed assistant call has toolCallId {commit.key!r}",
            )
        event = Event(
            tenant=commit.tenant_id,
            session=commit.session_id,
            seq=len(session.events) + 1,
            kind=commit.kind.value,
            payload=payload,
            committed_at=datetime.now(UTC),
        )
        session.events.append(event)
        if commit.dedupe_key is not None:
            session.keys[commit.dedupe_key] = (event, commit.digest)
        if commit.kind is Kind.USER_MESSAGE:
            self._owe_run(session, event.seq)
        return Submission(
            created=True,
            seq=event.seq,
            kind=event.kind,
            key=commit.key,
            committed_at=event.committed_at,
        )

    def _attempt_active(self, session: _Session) -> bool:
        run = session.run
        return (
            run is not None
            and run.status == _RUNNING
            and run.lease_expires_at is not None
            and run.lease_expires_at > self.now()
        )

    def _owe_run(self, session: _Session, seq: int) -> None:
        """An input makes its session owe a run (keel_commit's upsert of the run row)."""
        run = session.run
        if run is None:
            session.run = _Run(last_input_seq=seq, updated=self.tick())
            return
        run.last_input_seq = max(run.last_input_seq, seq)
        if run.status in _ENDED:
            run.attempts = 0
        if run.status != _RUNNING:
            run.status = _PENDING
        run.updated = self.tick()

    async def read_events(
        self, tenant_id: str, session_id: str, after: int = 0, limit: int = 100
    ) -> list[Event]:
        if after < 0 or not 1 <= limit <= MAX_READ_LIMIT:
            raise InvalidPage(f"after must be >= 0 and limit within 1..{MAX_READ_LIMIT}")
        return self.session(tenant_id, session_id).events[after : after + limit]

    async def head(self, tenant_id: str, session_id: str) -> int:
        return len(self.session(tenant_id, session_id).events)

    async def fork(
        self,
        tenant_id: str,
        source_id: str,
        *,
        at_seq: int | None = None,
        session_id: str | None = None,
    ) -> Fork:
        source = self.session(tenant_id, source_id)
        target = check_identifier(session_id or str(uuid.uuid4()), "session")
        point = check_fork_point(at_seq, len(source.events), external=source.external is not None)
        checker = ForkChecker()
        checker.check(source.events[:point])
        if (tenant_id, target) in self._sessions:
            raise SessionExists(f"session {target!r} already exists")
        fork = _Session(None, fork_of=(source_id, point))
        now = datetime.now(UTC)
        for e in source.events[:point]:
            meta = copy_metadata(source_id, e.seq, e.committed_at, e.metadata)
            fork.events.append(
                Event.trusted(tenant_id, target, e.seq, e.kind, e.payload, now, meta)
            )
        for key, (event, digest) in source.keys.items():
            if event.seq <= point:
                fork.keys[key] = (fork.events[event.seq - 1], digest)
        owed = checker.owed_input_seq()
        if owed is not None:
            self._owe_run(fork, owed)
        self._sessions[(tenant_id, target)] = fork
        for event in fork.events:
            for listener in self.commit_listeners:
                listener(event)
        return Fork(session_id=target, fork_of=source_id, at_seq=point, owed_input_seq=owed)

    def claimable(self, fairness: ClaimFairness) -> tuple[str, str, _Session, _Run] | None:
        """The claim's rules of keel_stream/store/sql/queries/claim_run.sql."""
        now = self.now()
        native = [
            (tenant, name, session, run)
            for (tenant, name), session in self._sessions.items()
            if (run := session.run) is not None
            and session.external is None
            and tenant not in fairness.skip_tenants
        ]
        expired = [
            c for c in native if c[3].status == _RUNNING and (c[3].lease_expires_at or 0) < now
        ]
        if expired:
            return min(expired, key=lambda c: c[3].lease_expires_at or 0)
        running = Counter(tenant for tenant, _, _, run in native if run.status == _RUNNING)
        pending = [
            c
            for c in native
            if c[3].status == _PENDING
            and (c[3].not_before is None or c[3].not_before <= now)
            and (fairness.tenant_cap == 0 or running[c[0]] < fairness.tenant_cap)
        ]
        if not pending:
            return None
        return min(pending, key=lambda c: (running[c[0]], c[3].updated))


def _holds(run: _Run, lease: LeaseToken) -> bool:
    return run.lease_owner == lease.owner and run.lease_epoch == lease.epoch


def _call_exists(session: _Session, call_id: str | None) -> bool:
    return any(
        block.get("id") == call_id
        for event in session.events
        if event.kind == Kind.ASSISTANT_MESSAGE
        for block in tool_call_blocks(event.payload)
    )


class MemoryRuns:
    """Implements keel_stream.store.protocol.Runs over a MemoryLedger."""

    def __init__(self, store: MemoryLedger, owner: str, lease_ttl_s: float) -> None:
        self._store = store
        self._owner = owner
        self._ttl = lease_ttl_s

    async def claim(self, fairness: ClaimFairness = NO_FAIRNESS) -> Claim | None:
        found = self._store.claimable(fairness)
        if found is None:
            return None
        tenant, name, _, run = found
        taken_over = run.status == _RUNNING
        run.status, run.lease_owner = _RUNNING, self._owner
        run.lease_epoch += 1
        run.lease_expires_at = self._store.now() + self._ttl
        if not taken_over:
            run.attempts += 1
        run.updated = self._store.tick()
        return Claim(
            tenant=tenant,
            session=name,
            lease=LeaseToken(owner=self._owner, epoch=run.lease_epoch),
            attempts=run.attempts,
            max_attempts=run.max_attempts,
            read_watermark=run.read_watermark,
            taken_over=taken_over,
            cancel_requested=run.cancel_requested,
        )

    def _held(self, claim: Claim) -> _Run | None:
        run = self._store.session(claim.tenant, claim.session).run
        return run if run is not None and _holds(run, claim.lease) else None

    async def heartbeat(self, claim: Claim) -> Heartbeat:
        run = self._held(claim)
        if run is None or run.status != _RUNNING:
            return Heartbeat(held=False, cancel_requested=False)
        run.lease_expires_at = self._store.now() + self._ttl
        return Heartbeat(held=True, cancel_requested=run.cancel_requested)

    async def settle(self, claim: Claim, settlement: Settlement) -> RunStatus | None:
        run = self._held(claim)
        if run is None:
            return None
        late = run.last_input_seq > settlement.accounted_through
        run.status = _PENDING if late else settlement.status.value
        if settlement.fresh_budget or late:
            run.attempts = 0
        run.lease_owner = run.lease_expires_at = None
        run.read_watermark = max(run.read_watermark, settlement.read_watermark)
        run.cancel_requested = False
        wait = settlement.retry_after_s
        run.not_before = self._store.now() + wait if wait is not None and wait > 0 else None
        run.updated = self._store.tick()
        return RunStatus(run.status)

    async def release(self, claim: Claim) -> bool:
        run = self._held(claim)
        if run is None:
            return False
        run.status, run.lease_owner, run.lease_expires_at = _PENDING, None, None
        run.attempts = max(run.attempts - 1, 0)
        run.updated = self._store.tick()
        return True

    async def request_cancel(self, tenant: str, session: str) -> bool:
        found = self._store.find(tenant, session)
        run = found.run if found is not None else None
        if run is None or run.status != _RUNNING:
            return False
        run.cancel_requested = True
        run.updated = self._store.tick()
        for listener in self._store.cancel_listeners:
            listener(tenant, session)
        return True
