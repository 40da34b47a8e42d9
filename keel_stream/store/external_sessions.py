"""External sessions as the gateway keeps them: their lifecycle marker, the active count per
tenant and backend (quota), the live ones to recount and resume at start, and where each one's
backend stream and turns stand in the ledger. PostgreSQL and memory adapters."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Protocol

import asyncpg

from keel_stream.errors import SessionNotFound
from keel_stream.kernel import Kind
from keel_stream.store.driver_errors import translated
from keel_stream.store.memory_ledger import MemoryLedger
from keel_stream.store.protocol import ExternalStatus, Metering
from keel_stream.store.sqlfiles import query

__all__ = [
    "ExternalSessions",
    "LiveExternal",
    "MemoryExternalSessions",
    "PostgresExternalSessions",
]


@dataclass(frozen=True, slots=True)
class LiveExternal:
    """An external session that is not closed: active or backend-unavailable."""

    tenant: str
    session: str
    backend: str
    ref: str | None
    status: ExternalStatus
    metering: Metering


class ExternalSessions(Protocol):
    async def set_status(self, tenant: str, session: str, status: ExternalStatus) -> bool:
        """Set the lifecycle marker; False when the session is closed (terminal) or unknown."""
        ...

    async def count_active(self, tenant: str, backend: str) -> int: ...

    async def live(self, backend: str | None = None) -> list[LiveExternal]:
        """Every external session not closed (of one backend, when given)."""
        ...

    async def last_backend_seq(self, tenant: str, session: str) -> int:
        """The highest backend event seq recorded in the session's log (0: none)."""
        ...

    async def latest_turn(self, tenant: str, session: str) -> str | None:
        """The turn id of the latest message sent to the backend."""
        ...


class PostgresExternalSessions:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def set_status(self, tenant: str, session: str, status: ExternalStatus) -> bool:
        async with translated("set external status"):
            row = await self._pool.fetchval(
                query("external_set_status"), tenant, session, status.value
            )
        return row is not None

    async def count_active(self, tenant: str, backend: str) -> int:
        async with translated("count external sessions"):
            count = await self._pool.fetchval(query("external_count_active"), tenant, backend)
        return int(count)

    async def live(self, backend: str | None = None) -> list[LiveExternal]:
        async with translated("list live external sessions"):
            rows = await self._pool.fetch(query("external_live"), backend)
        return [
            LiveExternal(
                r["tenant_id"],
                r["session_id"],
                r["external_backend"],
                r["external_ref"],
                ExternalStatus(r["external_status"]),
                Metering(r["metering"]),
            )
            for r in rows
        ]

    async def last_backend_seq(self, tenant: str, session: str) -> int:
        async with translated("read backend position"):
            seq = await self._pool.fetchval(query("external_last_backend_seq"), tenant, session)
        return 0 if seq is None else int(seq)

    async def latest_turn(self, tenant: str, session: str) -> str | None:
        async with translated("read latest turn"):
            turn = await self._pool.fetchval(query("external_latest_turn"), tenant, session)
        return None if turn is None else str(turn)


class MemoryExternalSessions:
    """The same over a MemoryLedger (unit tests, embedding)."""

    def __init__(self, store: MemoryLedger) -> None:
        self._store = store

    async def set_status(self, tenant: str, session: str, status: ExternalStatus) -> bool:
        found = self._store.find(tenant, session)
        if found is None or found.external is None:
            return False
        if found.external.status == ExternalStatus.CLOSED:
            return False
        found.external = dataclasses.replace(found.external, status=status)
        return True

    async def count_active(self, tenant: str, backend: str) -> int:
        return sum(
            1
            for item in await self.live(backend)
            if item.tenant == tenant and item.status == ExternalStatus.ACTIVE
        )

    async def live(self, backend: str | None = None) -> list[LiveExternal]:
        found = []
        for tenant, session in self._store.session_keys():
            markers = self._store.session(tenant, session).external
            if markers is None or markers.status == ExternalStatus.CLOSED:
                continue
            if backend is None or markers.backend == backend:
                found.append(
                    LiveExternal(
                        tenant,
                        session,
                        markers.backend,
                        markers.ref,
                        markers.status,
                        markers.metering,
                    )
                )
        return found

    def _external_events(self, tenant: str, session: str) -> list[dict[str, object]]:
        found = self._store.find(tenant, session)
        if found is None:
            raise SessionNotFound(f"session {session!r} not found")
        return [e.payload for e in found.events if e.kind == Kind.EXTERNAL_EVENT]

    async def last_backend_seq(self, tenant: str, session: str) -> int:
        for payload in reversed(self._external_events(tenant, session)):
            seq = payload.get("backendSeq")
            if isinstance(seq, int):
                return seq
        return 0

    async def latest_turn(self, tenant: str, session: str) -> str | None:
        for payload in reversed(self._external_events(tenant, session)):
            if payload.get("direction") == "outbound" and isinstance(payload.get("turnId"), str):
                return str(payload["turnId"])
        return None
