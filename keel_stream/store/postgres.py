"""The PostgreSQL ledger: the commit (one round trip to keel_commit, migrations 0031 and 0053)
and the reads."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import asyncpg
import orjson

from keel_stream.errors import (
    InvalidPage,
    InvalidPayload,
    KeelError,
    LeaseFenced,
    PayloadRule,
    SessionExists,
    SessionNotFound,
    StoreError,
    StoreUnavailable,
    TenantExists,
    TenantNotFound,
)
from keel_stream.kernel.commits import (
    PreparedCommit,
    SessionState,
    check_class_gate,
    check_identifier,
    class_gate,
    prepare,
    replayed,
)
from keel_stream.kernel.forks import Fork
from keel_stream.kernel.types import CommitRequest, Event, Submission
from keel_stream.kernel.vocabulary import Kind, StateOwner
from keel_stream.logs import get_logger
from keel_stream.store.driver_errors import translated
from keel_stream.store.forks import fork_in_postgres
from keel_stream.store.protocol import MAX_READ_LIMIT, ExternalMarkers, check_one_session
from keel_stream.store.sqlfiles import query

__all__ = ["MAX_READ_LIMIT", "PostgresLedger", "event_of"]

_EXTERNAL: Final = StateOwner.EXTERNAL.value
_log = get_logger("store.commit")
_REFUSED: Final = "KL001"
"""keel_commit's SQLSTATE for a refused commit (migrations 0031, 0053): the call rolled back."""


_GROUP_MAX: Final = 32
"""The most commits one call carries."""
_CALLS_FREE: Final = 2
"""Commit calls of one ledger in flight before commits wait for the next call."""
_CALLS_MAX: Final = 4
"""The most commit calls of one ledger in flight."""
_STALLED_S: Final = 0.05
"""Commits wait for the call in flight to end, unless it has run this long (a lock wait, a
slow check): then another call starts, so one slow session cannot hold up the others for long."""


@dataclass(frozen=True, slots=True)
class _Waiting:
    """A commit queued for the next group call, with the future its caller awaits."""

    commit: PreparedCommit
    future: asyncio.Future[Submission]


def _arguments(commits: list[PreparedCommit], *, atomic: bool) -> tuple[object, ...]:
    """keel_commit's parameters: the mode, then one array element per commit."""
    leases = [commit.lease for commit in commits]
    return (
        atomic,
        [commit.tenant_id for commit in commits],
        [commit.session_id for commit in commits],
        [commit.kind.value for commit in commits],
        [_admitted(commit) for commit in commits],
        [class_gate(commit.spec.commit_class).fenced for commit in commits],
        [commit.payload for commit in commits],
        [commit.dedupe_key for commit in commits],
        [commit.digest for commit in commits],
        [lease.owner if lease is not None else None for lease in leases],
        [lease.epoch if lease is not None else None for lease in leases],
        [commit.key if commit.kind is Kind.TOOL_RESULT else None for commit in commits],
    )


def _admitted(commit: PreparedCommit) -> str:
    """The session states the commit's class admits, as keel_commit reads them."""
    return " ".join(sorted(class_gate(commit.spec.commit_class).admits))


def _refusal(commit: PreparedCommit, reason: str, detail: dict[str, Any]) -> KeelError:
    """The keel error for one of keel_commit's refusals (reason, JSON detail)."""
    session = commit.session_id
    match reason:
        case "session_not_found":
            return SessionNotFound(f"session {session!r} not found")
        case "lease_fenced":
            lease = commit.lease
            return LeaseFenced(
                f"lease {lease and lease.owner}@{lease and lease.epoch} does not hold session "
                f"{session!r}"
            )
        case "tool_call_not_found":
            return InvalidPayload(
                PayloadRule.TOOL_CALL_NOT_FOUND,
                f"no committed assistant call has toolCallId {commit.key!r}",
            )
        case "class_gate":
            try:
                check_class_gate(commit, SessionState(detail["state"]))
            except KeelError as refused:
                return refused
        case "idempotency_conflict":
            at = datetime.fromisoformat(detail["committedAt"])
            try:
                replayed(commit, detail["kind"], detail["digest"], detail["seq"], at)
            except KeelError as refused:
                return refused
    return StoreError(f"commit: keel_commit refused with {reason!r} ({detail})")


def _unknown(group: list[_Waiting]) -> list[Submission | KeelError]:
    """For the callers of a group call that ended without outcomes (cancelled, a bug)."""
    return [StoreUnavailable("commit: the group call ended without an outcome") for _ in group]


def _settle(group: list[_Waiting], outcomes: list[Submission | KeelError]) -> None:
    """Hand each waiting caller its outcome (a caller that gave up is passed over)."""
    for waiting, outcome in zip(group, outcomes, strict=True):
        if waiting.future.done():
            continue
        if isinstance(outcome, KeelError):
            waiting.future.set_exception(outcome)
        else:
            waiting.future.set_result(outcome)


def _outcome(commit: PreparedCommit, row: asyncpg.Record) -> Submission | KeelError:
    if row["out_refusal"] is not None:
        return _refusal(commit, row["out_refusal"], orjson.loads(row["out_detail"]))
    return Submission.model_construct(  # the values keel_commit returned: no validation
        created=row["out_created"],
        seq=row["out_seq"],
        kind=commit.kind.value,
        key=commit.key,
        committed_at=row["out_committed_at"],
    )


def event_of(tenant: str, session: str, row: asyncpg.Record) -> Event:
    """A committed event from a row of the events table (metadata when the query reads it)."""
    return Event(
        tenant=tenant,
        session=session,
        seq=row["seq"],
        kind=row["kind"],
        payload=row["payload"],
        committed_at=row["committed_at"],
        metadata=row.get("metadata"),
    )


class PostgresLedger:
    """The ledger on an asyncpg pool. Implements keel_stream.store.protocol.Ledger."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._calls: dict[object, float] = {}
        """When the call of each caller in flight started (loop time)."""
        self._stalls: dict[object, asyncio.TimerHandle] = {}
        self._waiting: list[_Waiting] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def create_tenant(self, tenant_id: str, name: str = "") -> None:
        check_identifier(tenant_id, "tenant")
        async with translated("create tenant"):
            created = await self._pool.fetchval(query("insert_tenant"), tenant_id, name)
        if created is None:
            raise TenantExists(f"tenant {tenant_id!r} already exists")

    async def create_session(
        self, tenant_id: str, session_id: str | None = None, external: ExternalMarkers | None = None
    ) -> str:
        check_identifier(tenant_id, "tenant")
        session_id = check_identifier(session_id or str(uuid.uuid4()), "session")
        markers = (
            (_EXTERNAL, external.backend, external.ref, external.status, external.metering)
            if external is not None
            else (StateOwner.KEEL.value, None, None, None, None)
        )
        async with translated("create session"), self._pool.acquire() as conn:
            created = await conn.fetchval(query("insert_session"), tenant_id, session_id, *markers)
            if created is None:
                if not await conn.fetchval(query("tenant_exists"), tenant_id):
                    raise TenantNotFound(f"tenant {tenant_id!r} does not exist")
                raise SessionExists(f"session {session_id!r} already exists")
        return session_id

    async def commit(self, request: CommitRequest) -> Submission:
        """Group commit: a commit makes a call of its own while few calls are in flight; else it
        waits for the next call, which carries the commits waiting by then in one transaction,
        each standing or refused alone."""
        commit = prepare(request)
        if not self._may_call():
            waiting = _Waiting(commit, asyncio.get_running_loop().create_future())
            self._waiting.append(waiting)
            return await waiting.future
        token = self._begin()
        try:
            async with translated("commit"), self._pool.acquire() as conn:
                (outcome,) = await self._call(conn, [commit], atomic=False)
        finally:
            self._end(token)
        if isinstance(outcome, KeelError):
            raise outcome
        return outcome

    async def commit_many(self, requests: Sequence[CommitRequest]) -> list[Submission]:
        commits = [prepare(request) for request in requests]
        if not commits:
            return []
        check_one_session(commits)
        async with translated("commit"), self._pool.acquire() as conn:
            outcomes = await self._call(conn, commits, atomic=True)
        submissions = []
        for outcome in outcomes:
            if isinstance(outcome, KeelError):  # atomic: keel_commit raised any refusal
                raise outcome
            submissions.append(outcome)
        return submissions

    def _may_call(self) -> bool:
        """Below _CALLS_FREE calls in flight, or below _CALLS_MAX when all of them stalled."""
        calls = self._calls
        if len(calls) < _CALLS_FREE:
            return True
        stalled = asyncio.get_running_loop().time() - max(calls.values()) >= _STALLED_S
        return stalled and len(calls) < _CALLS_MAX

    def _begin(self, token: object | None = None) -> object:
        """A call starts (for a new caller, or the next of a caller of groups): should it
        stall, the commits waiting by then get a call of their own."""
        token = token if token is not None else object()
        loop = asyncio.get_running_loop()
        self._calls[token] = loop.time()
        stall = self._stalls.pop(token, None)
        if stall is not None:
            stall.cancel()
        self._stalls[token] = loop.call_later(_STALLED_S, self._next_groups)
        return token

    def _end(self, token: object) -> None:
        del self._calls[token]
        self._stalls.pop(token).cancel()
        self._next_groups()

    def _next_groups(self) -> None:
        """Start a caller of groups for the commits waiting, while calls may start."""
        while self._waiting and self._may_call():
            task = asyncio.get_running_loop().create_task(self._groups(self._begin()))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _groups(self, token: object) -> None:
        """Group calls on one connection while commits wait (each group sorted by session, so
        that calls lock sessions in one order). A stalled call lets another caller start."""
        group: list[_Waiting] = []
        try:
            async with translated("commit"), self._pool.acquire() as conn:
                while self._waiting:
                    group, self._waiting = self._waiting[:_GROUP_MAX], self._waiting[_GROUP_MAX:]
                    group = [w for w in group if not w.future.done()]  # not the given up
                    group.sort(key=lambda w: (w.commit.tenant_id, w.commit.session_id))
                    if group:
                        self._begin(token)
                        _settle(group, await self._group(conn, group))
                    group = []
        except KeelError as exc:  # the connection broke (outcome unknown), or there was none
            if not group:  # no connection: every commit waiting is told, none spins
                group, self._waiting = self._waiting, []
            _settle(group, [StoreUnavailable(str(exc)) for _ in group])
        finally:
            _settle(group, _unknown(group))
            self._end(token)

    async def _group(
        self, conn: asyncpg.Connection, group: list[_Waiting]
    ) -> list[Submission | KeelError]:
        commits = [w.commit for w in group]
        try:
            return await self._call(conn, commits, atomic=False)
        except StoreUnavailable:
            raise
        except StoreError:  # the server failed the whole call, which wrote nothing: one by one
            return [await self._alone(conn, commit) for commit in commits]

    async def _alone(
        self, conn: asyncpg.Connection, commit: PreparedCommit
    ) -> Submission | KeelError:
        try:
            (outcome,) = await self._call(conn, [commit], atomic=False)
        except StoreUnavailable:
            raise
        except KeelError as exc:
            return exc
        return outcome

    async def _call(
        self, conn: asyncpg.Connection, commits: list[PreparedCommit], *, atomic: bool
    ) -> list[Submission | KeelError]:
        """keel_commit (migrations 0031, 0053) in one round trip, then the created events' wake-ups
        on the same connection. Atomic: any refusal raises and nothing is written."""
        async with translated("commit"):
            try:
                rows = await conn.fetch(query("commit"), *_arguments(commits, atomic=atomic))
            except asyncpg.PostgresError as exc:
                if exc.sqlstate != _REFUSED:
                    raise
                detail: dict[str, Any] = orjson.loads(getattr(exc, "detail", None) or "{}")
                reason = getattr(exc, "message", "")
                raise _refusal(commits[detail.get("index", 0)], reason, detail) from exc
        woken = [
            f"{commit.tenant_id}/{commit.session_id}/{row['out_seq']}"
            for commit, row in zip(commits, rows, strict=True)
            if row["out_created"]
        ]
        if woken:
            await self._wake(conn, woken)
        return [_outcome(commit, row) for commit, row in zip(commits, rows, strict=True)]

    async def _wake(self, conn: asyncpg.Connection, payloads: list[str]) -> None:
        """NOTIFY keel_commits for events that committed, in a transaction of their own: in the
        commit's, PostgreSQL's notify lock is held across the commit's WAL flush and serialises
        every commit of the database. The commit stands whatever happens here: listeners read
        by seq and also poll, so a lost wake-up costs latency, never an event."""
        try:
            await conn.execute(query("notify_commits"), payloads)
        except (
            asyncpg.PostgresError,
            asyncpg.InterfaceError,
            asyncpg.InternalClientError,
            OSError,
        ) as exc:
            _log.warning("commit wake-up not sent", events=payloads, error=repr(exc))

    async def read_events(
        self, tenant_id: str, session_id: str, after: int = 0, limit: int = 100
    ) -> list[Event]:
        if after < 0 or not 1 <= limit <= MAX_READ_LIMIT:
            raise InvalidPage(f"after must be >= 0 and limit within 1..{MAX_READ_LIMIT}")
        await self.head(tenant_id, session_id)
        async with translated("read events"):
            rows = await self._pool.fetch(query("read_events"), tenant_id, session_id, after, limit)
        return [event_of(tenant_id, session_id, row) for row in rows]

    async def fork(
        self,
        tenant_id: str,
        source_id: str,
        *,
        at_seq: int | None = None,
        session_id: str | None = None,
    ) -> Fork:
        return await fork_in_postgres(
            self._pool, self, tenant_id, source_id, at_seq=at_seq, session_id=session_id
        )

    async def head(self, tenant_id: str, session_id: str) -> int:
        check_identifier(tenant_id, "tenant")
        check_identifier(session_id, "session")
        async with translated("read head"):
            last_seq = await self._pool.fetchval(query("session_head"), tenant_id, session_id)
        if last_seq is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        return int(last_seq)
