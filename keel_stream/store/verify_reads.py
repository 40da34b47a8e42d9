"""What `keel-stream verify` reads from PostgreSQL: the session heads and the outbox mark in one
snapshot, the outbox rows still waiting, the ledger page by page, and the live read models."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

import asyncpg

from keel_stream.store.driver_errors import translated
from keel_stream.store.projection_rows import TRANSCRIPT, read_transcripts
from keel_stream.store.projection_state import StoredState
from keel_stream.store.sqlfiles import query

__all__ = [
    "LEDGER_END",
    "Key",
    "LedgerEvent",
    "PostgresVerifyReads",
    "Scope",
    "Snapshot",
    "VerifyReads",
]

Key = tuple[str, str]
"""(tenant, session)"""

LEDGER_END: Final = 2**62


@dataclass(frozen=True, slots=True)
class Scope:
    """Which sessions are verified: all, one tenant's, those with one id, or one session."""

    tenant: str | None = None
    session: str | None = None

    def admits(self, tenant: str, session: str) -> bool:
        return (self.tenant is None or tenant == self.tenant) and (
            self.session is None or session == self.session
        )


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    """A ledger row as the verification compares and folds it: `Event`'s fields, built without
    pydantic (a verification reads every event of the ledger)."""

    tenant: str
    session: str
    seq: int
    kind: str
    payload: dict[str, Any]
    committed_at: datetime

    @property
    def key(self) -> Key:
        return (self.tenant, self.session)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The verified sessions' heads and the newest outbox id, as of one moment."""

    heads: dict[Key, int]
    outbox_mark: int


def _events(rows: Sequence[asyncpg.Record]) -> list[LedgerEvent]:
    return [
        LedgerEvent(
            r["tenant_id"], r["session_id"], r["seq"], r["kind"], r["payload"], r["committed_at"]
        )
        for r in rows
    ]


class VerifyReads(Protocol):
    """What verify reads of the ledger and the live projection states."""

    async def tenant_exists(self, tenant: str) -> bool: ...

    async def snapshot(self, scope: Scope) -> Snapshot:
        """The heads and the outbox mark in one repeatable-read snapshot, so every event at or
        below a head has its outbox row (if it still has one) at or below the mark."""
        ...

    async def pending_count(self, scope: Scope, mark: int) -> int:
        """Outbox rows at or below the mark still waiting for the relay."""
        ...

    async def pending(self, scope: Scope, mark: int) -> dict[Key, set[int]]:
        """Per session, the seqs whose outbox rows (at or below the mark) are still waiting."""
        ...

    async def events_between(self, after: Key, upto: Key) -> list[LedgerEvent]:
        """The events of the sessions with after < key <= upto, in key and seq order."""
        ...

    async def ledger_range(
        self, tenant: str, session: str, after: int, upto: int = LEDGER_END
    ) -> list[LedgerEvent]:
        """One session's events with after < seq <= upto, in seq order."""
        ...

    async def live_states(self, keys: Sequence[Key]) -> dict[tuple[str, Key], StoredState]:
        """The live read model of every projection for these sessions, by (projection, key)."""
        ...


class PostgresVerifyReads:
    """The reads of a verification, on an asyncpg pool (read-only: nothing is ever written)."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def tenant_exists(self, tenant: str) -> bool:
        async with translated("look up tenant"):
            return bool(await self._pool.fetchval(query("tenant_exists"), tenant))

    async def snapshot(self, scope: Scope) -> Snapshot:
        """The heads and the outbox mark in one repeatable-read snapshot, so every event at or
        below a head has its outbox row (if it still has one) at or below the mark."""
        async with (
            translated("read session heads"),
            self._pool.acquire() as conn,
            conn.transaction(isolation="repeatable_read", readonly=True),
        ):
            rows = await conn.fetch(query("verify_session_heads"), scope.tenant, scope.session)
            mark = await conn.fetchval(query("verify_outbox_mark"))
        heads = {(r["tenant_id"], r["session_id"]): int(r["last_seq"]) for r in rows}
        return Snapshot(heads, int(mark))

    async def pending_count(self, scope: Scope, mark: int) -> int:
        """Outbox rows at or below the mark still waiting for the relay."""
        async with translated("count the outbox"):
            count = await self._pool.fetchval(
                query("verify_outbox_pending_count"), mark, scope.tenant, scope.session
            )
        return int(count)

    async def pending(self, scope: Scope, mark: int) -> dict[Key, set[int]]:
        """Per session, the seqs whose outbox rows (at or below the mark) are still waiting."""
        async with translated("read the outbox"):
            rows = await self._pool.fetch(
                query("verify_outbox_pending"), mark, scope.tenant, scope.session
            )
        found: dict[Key, set[int]] = {}
        for r in rows:
            found.setdefault((r["tenant_id"], r["session_id"]), set()).add(int(r["seq"]))
        return found

    async def events_between(self, after: Key, upto: Key) -> list[LedgerEvent]:
        """The events of the sessions with after < key <= upto, in key and seq order."""
        async with translated("read the ledger"):
            rows = await self._pool.fetch(query("verify_events_between"), *after, *upto)
        return _events(rows)

    async def ledger_range(
        self, tenant: str, session: str, after: int, upto: int = LEDGER_END
    ) -> list[LedgerEvent]:
        """One session's events with after < seq <= upto, in seq order."""
        async with translated("read the ledger"):
            rows = await self._pool.fetch(query("ledger_range"), tenant, session, after, upto)
        return [
            LedgerEvent(tenant, session, r["seq"], r["kind"], r["payload"], r["committed_at"])
            for r in rows
        ]

    async def live_states(self, keys: Sequence[Key]) -> dict[tuple[str, Key], StoredState]:
        """The live read model of every projection for these sessions, by (projection, key)."""
        if not keys:
            return {}
        async with translated("read the read models"):
            rows = await self._pool.fetch(
                query("verify_live_states"), [k[0] for k in keys], [k[1] for k in keys]
            )
        states = {
            (r["projection"], (r["tenant_id"], r["session_id"])): StoredState(
                int(r["last_seq"]), r["state"]
            )
            for r in rows
        }
        # The transcript's state there is its head: the model is the head and its entry rows.
        transcripts = await read_transcripts(self._pool, TRANSCRIPT, keys)
        for key, (last_seq, model) in transcripts.items():
            states[(TRANSCRIPT, key)] = StoredState(last_seq, model)
        return states
