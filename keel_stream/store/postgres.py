"""The PostgreSQL ledger: the commit transaction and the reads."""

from __future__ import annotations

import uuid
from typing import Final

import asyncpg

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
    check_class_gate,
    check_identifier,
    prepare,
    replayed,
)
from keel_stream.kernel.delivery import Delivery, with_effective_delivery
from keel_stream.kernel.types import CommitRequest, Event, Submission
from keel_stream.kernel.vocabulary import Kind, StateOwner
from keel_stream.store.driver_errors import translated
from keel_stream.store.protocol import MAX_READ_LIMIT, ExternalMarkers, ExternalStatus
from keel_stream.store.sqlfiles import query

__all__ = ["MAX_READ_LIMIT", "PostgresLedger"]

_EXTERNAL: Final = StateOwner.EXTERNAL.value


class PostgresLedger:
    """The ledger on an asyncpg pool. Implements keel_stream.store.protocol.Ledger."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

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
        prepared = prepare(request)
        async with translated("commit"), self._pool.acquire() as conn, conn.transaction():
            return await self._commit_locked(conn, prepared)

    async def _commit_locked(self, conn: asyncpg.Connection, commit: PreparedCommit) -> Submission:
        tenant, session = commit.tenant_id, commit.session_id
        row = await conn.fetchrow(query("lock_session"), tenant, session)
        if row is None:
            raise SessionNotFound(f"session {session!r} not found")
        external = row["state_owner"] == _EXTERNAL
        closed = row["external_status"] == ExternalStatus.CLOSED
        if check_class_gate(commit, external=external, closed=closed):
            await self._check_fence(conn, commit)
        if commit.dedupe_key is not None:
            # A statement of its own, after the lock: under READ COMMITTED it sees a retry that
            # committed while we waited for the lock. Folded into the locking statement, its
            # snapshot could predate that retry and the insert would hit the unique index.
            original = await conn.fetchrow(
                query("find_by_dedupe_key"), tenant, session, commit.dedupe_key
            )
            if original is not None:
                return replayed(
                    commit,
                    original["kind"],
                    original["request_digest"],
                    original["seq"],
                    original["committed_at"],
                )
        payload = commit.payload
        if commit.kind is Kind.USER_MESSAGE and payload.get("delivery") == Delivery.GUIDE:
            payload = with_effective_delivery(payload, await self._attempt_active(conn, commit))
        if commit.kind is Kind.TOOL_RESULT:
            exists = await conn.fetchval(query("tool_call_exists"), tenant, session, commit.key)
            if not exists:
                raise InvalidPayload(
                    PayloadRule.TOOL_CALL_NOT_FOUND,
                    f"no committed assistant call has toolCallId {commit.key!r}",
                )
        appended = await conn.fetchrow(
            query("append_event"),
            tenant,
            session,
            commit.kind.value,
            payload,
            commit.dedupe_key,
            commit.digest,
            commit.kind is Kind.USER_MESSAGE,  # an input and the run that answers it: one statement
        )
        return Submission(
            created=True,
            seq=appended["seq"],
            kind=commit.kind.value,
            key=commit.key,
            committed_at=appended["committed_at"],
        )

    async def _check_fence(self, conn: asyncpg.Connection, commit: PreparedCommit) -> None:
        run = await conn.fetchrow(query("share_lock_run"), commit.tenant_id, commit.session_id)
        lease = commit.lease
        if (
            lease is None  # prepare() refused it already; kept so the check stands on its own
            or run is None
            or run["lease_owner"] != lease.owner
            or run["lease_epoch"] != lease.epoch
        ):
            raise LeaseFenced(
                f"lease {lease and lease.owner}@{lease and lease.epoch} does not hold session "
                f"{commit.session_id!r}"
            )

    async def _attempt_active(self, conn: asyncpg.Connection, commit: PreparedCommit) -> bool:
        run = await conn.fetchrow(query("share_lock_run"), commit.tenant_id, commit.session_id)
        return run is not None and bool(run["attempt_active"])

    async def read_events(
        self, tenant_id: str, session_id: str, after: int = 0, limit: int = 100
    ) -> list[Event]:
        if after < 0 or not 1 <= limit <= MAX_READ_LIMIT:
            raise InvalidPage(f"after must be >= 0 and limit within 1..{MAX_READ_LIMIT}")
        await self.head(tenant_id, session_id)
        async with translated("read events"):
            rows = await self._pool.fetch(query("read_events"), tenant_id, session_id, after, limit)
        return [
            Event(
                tenant=tenant_id,
                session=session_id,
                seq=row["seq"],
                kind=row["kind"],
                payload=row["payload"],
                committed_at=row["committed_at"],
            )
            for row in rows
        ]

    async def head(self, tenant_id: str, session_id: str) -> int:
        check_identifier(tenant_id, "tenant")
        check_identifier(session_id, "session")
        async with translated("read head"):
            last_seq = await self._pool.fetchval(query("session_head"), tenant_id, session_id)
        if last_seq is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        return int(last_seq)
