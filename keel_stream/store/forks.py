"""Forking a session in PostgreSQL: the kernel checks the copies, keel_fork writes them.

The source's events 1..N are read in pages and checked by the kernel (keel_stream.kernel.forks)
before anything is written; keel_fork (migration 0033) then creates the session and copies the
same events (a log only grows, so 1..N read before the call are the ones it copies) with their
outbox rows, and the run the fork owes, in one transaction.
"""

from __future__ import annotations

import uuid
from typing import Final

import asyncpg

from keel_stream.errors import (
    ExternalSession,
    InvalidRequest,
    SessionExists,
    SessionNotFound,
    StoreError,
)
from keel_stream.kernel.commits import check_identifier
from keel_stream.kernel.forks import Fork, ForkChecker, check_fork_point, copy_metadata
from keel_stream.logs import get_logger
from keel_stream.store.driver_errors import translated
from keel_stream.store.protocol import MAX_READ_LIMIT, Ledger
from keel_stream.store.sqlfiles import query

__all__ = ["fork_in_postgres"]

_REFUSED: Final = "KL001"
_log = get_logger("store.fork")


async def fork_in_postgres(
    pool: asyncpg.Pool,
    ledger: Ledger,
    tenant: str,
    source: str,
    *,
    at_seq: int | None,
    session_id: str | None,
) -> Fork:
    check_identifier(tenant, "tenant")
    check_identifier(source, "session")
    target = check_identifier(session_id or str(uuid.uuid4()), "session")
    async with translated("fork: read the source"):
        row = await pool.fetchrow(query("fork_source"), tenant, source)
    if row is None:
        raise SessionNotFound(f"session {source!r} not found")
    point = check_fork_point(at_seq, int(row["last_seq"]), external=bool(row["external"]))
    checker = ForkChecker()
    metadata: list[dict[str, object]] = []
    while len(metadata) < point:
        page = await ledger.read_events(
            tenant, source, after=len(metadata), limit=min(MAX_READ_LIMIT, point - len(metadata))
        )
        checker.check(page)
        metadata.extend(copy_metadata(source, e.seq, e.committed_at, e.metadata) for e in page)
    owed = checker.owed_input_seq()
    await _write(pool, tenant, source, target, point, metadata, owed)
    return Fork(session_id=target, fork_of=source, at_seq=point, owed_input_seq=owed)


async def _write(
    pool: asyncpg.Pool,
    tenant: str,
    source: str,
    target: str,
    point: int,
    metadata: list[dict[str, object]],
    owed: int | None,
) -> None:
    async with translated("fork"), pool.acquire() as conn:
        try:
            created = await conn.fetchval(
                query("fork_session"), tenant, source, target, point, metadata, owed
            )
        except asyncpg.PostgresError as exc:
            if exc.sqlstate != _REFUSED:
                raise
            raise _refusal(getattr(exc, "message", ""), source, point) from exc
        if not created:
            raise SessionExists(f"session {target!r} already exists")
        if point > 0:
            # One wake-up at the head: listeners read on by seq from where they are.
            try:
                await conn.execute(query("notify_commits"), [f"{tenant}/{target}/{point}"])
            except asyncpg.PostgresError as exc:
                _log.warning("fork wake-up not sent", session=target, error=repr(exc))


def _refusal(reason: str, source: str, point: int) -> Exception:
    match reason:
        case "session_not_found":
            return SessionNotFound(f"session {source!r} not found")
        case "fork_of_external":
            return ExternalSession(f"session {source!r} is external: it cannot be forked here")
        case "fork_past_head":
            return InvalidRequest(f"atSeq {point} is past the end of {source!r}")
    return StoreError(f"fork: keel_fork refused with {reason!r}")
