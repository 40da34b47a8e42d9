"""Sessions as the API lists and shows them (with their run row), and runs asked for by a
client (`POST /run`). The ledger's own reads and commits are keel_stream.store.postgres."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import asyncpg

from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query

__all__ = ["PostgresSessions", "RunRecord", "SessionRecord", "Sessions"]


@dataclass(frozen=True, slots=True)
class SessionRecord:
    session_id: str
    last_seq: int
    state_owner: str
    created_at: datetime
    run_status: str | None
    attempts: int | None
    lease_epoch: int | None
    external_backend: str | None
    external_ref: str | None
    external_status: str | None
    metering: str | None
    forked_from: str | None = None
    forked_at_seq: int | None = None
    open_decisions: tuple[str, ...] = ()
    """Decisions waiting for an answer (the deadlines index: set when an attempt settles)."""
    parent_session: str | None = None
    """A subagent's parent (with the call it answers, its depth and its tree's root)."""
    parent_call: str | None = None
    subagent_depth: int | None = None
    root_session: str | None = None


@dataclass(frozen=True, slots=True)
class RunRecord:
    status: str
    read_watermark: int


def _session(row: asyncpg.Record) -> SessionRecord:
    fields: dict[str, Any] = dict(row)
    return SessionRecord(
        session_id=fields["session_id"],
        last_seq=fields["last_seq"],
        state_owner=fields["state_owner"],
        created_at=fields["created_at"],
        run_status=fields.get("run_status"),
        attempts=fields.get("attempts"),
        lease_epoch=fields.get("lease_epoch"),
        external_backend=fields.get("external_backend"),
        external_ref=fields.get("external_ref"),
        external_status=fields.get("external_status"),
        metering=fields.get("metering"),
        forked_from=fields.get("forked_from"),
        forked_at_seq=fields.get("forked_at_seq"),
        open_decisions=tuple(fields.get("open_decisions") or ()),
        parent_session=fields.get("parent_session"),
        parent_call=fields.get("parent_call"),
        subagent_depth=fields.get("subagent_depth"),
        root_session=fields.get("root_session"),
    )


class Sessions(Protocol):
    """Sessions and their run rows, as the API lists and reads them."""

    async def get(self, tenant: str, session_id: str) -> SessionRecord | None:
        """The session with its run row; None when the tenant has no such session."""
        ...

    async def page(
        self,
        tenant: str,
        cursor: str | None,
        limit: int,
        *,
        run_status: str | None = None,
        state_owner: str | None = None,
    ) -> list[SessionRecord]:
        """Up to `limit` sessions of the tenant after `cursor`, in the list's order; only those
        whose run has `run_status` ('none': no run) and of `state_owner`, when given."""
        ...

    async def run_of(self, tenant: str, session_id: str) -> RunRecord | None: ...

    async def queue_run(self, tenant: str, session_id: str) -> str | None:
        """Make the session owe a run (pending; a run that ended gets a fresh budget); the run's
        status, or None for an external session (never queued)."""
        ...

    async def schema_version(self) -> int | None:
        """The highest applied migration; None before the first."""
        ...


class PostgresSessions:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def get(self, tenant: str, session_id: str) -> SessionRecord | None:
        """The session with its run row; None when the tenant has no such session."""
        async with translated("read session"):
            row = await self._pool.fetchrow(query("get_session"), tenant, session_id)
        return None if row is None else _session(row)

    async def page(
        self,
        tenant: str,
        cursor: str | None,
        limit: int,
        *,
        run_status: str | None = None,
        state_owner: str | None = None,
    ) -> list[SessionRecord]:
        """Up to `limit` sessions of the tenant after `cursor`, in the list's order; only those
        whose run has `run_status` ('none': no run) and of `state_owner`, when given."""
        async with translated("list sessions"):
            rows = await self._pool.fetch(
                query("list_sessions"), tenant, cursor, limit, run_status, state_owner
            )
        return [_session(r) for r in rows]

    async def run_of(self, tenant: str, session_id: str) -> RunRecord | None:
        async with translated("read run"):
            row = await self._pool.fetchrow(query("run_of_session"), tenant, session_id)
        return None if row is None else RunRecord(row["status"], row["read_watermark"])

    async def queue_run(self, tenant: str, session_id: str) -> str | None:
        """Make the session owe a run (pending; a run that ended gets a fresh budget); the run's
        status, or None for an external session (never queued)."""
        async with translated("queue run"):
            status = await self._pool.fetchval(query("queue_run"), tenant, session_id)
        return None if status is None else str(status)

    async def schema_version(self) -> int | None:
        """The highest applied migration; None before the first."""
        async with translated("ready check"):
            version = await self._pool.fetchval(query("schema_version"))
        return None if version is None else int(version)
