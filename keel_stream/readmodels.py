"""Reading the projections' read models, with read-your-writes by seq.

`get(..., min_seq=n)` waits (up to a deadline) until the live model of the session has applied
seq n, so a client that just committed seq n can read a model that includes it. Waiting is
woken by the projector's NOTIFY after every applied batch, with a short poll as a backstop.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, Final

import asyncpg

from keel_stream.errors import InvalidPage, ProjectionBehind, UnknownProjection
from keel_stream.kernel.commits import check_identifier
from keel_stream.store.driver_errors import translated
from keel_stream.store.postgres import PostgresLedger
from keel_stream.store.sqlfiles import query
from projections import ALL

__all__ = ["ProjectionView", "ReadModels"]

_BY_NAME: Final = {p.name: p for p in ALL}
_POLL_S: Final = 0.25


@dataclass(frozen=True, slots=True)
class ProjectionView:
    """A session's read model as served: the last seq it includes and its JSON state."""

    projection: str
    last_seq: int
    state: dict[str, Any]


class ReadModels:
    """Reads live read models from PostgreSQL; `start()` enables NOTIFY wake-ups."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._ledger = PostgresLedger(pool)
        self._listener: asyncpg.Connection | None = None
        self._applied = asyncio.Condition()

    async def start(self) -> None:
        async with translated("listen"):
            self._listener = await self._pool.acquire()
            await self._listener.add_listener("keel_projections", self._on_applied)

    async def close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                await self._listener.remove_listener("keel_projections", self._on_applied)
            await self._pool.release(self._listener)
            self._listener = None

    def _on_applied(self, *_: object) -> None:
        async def notify_all() -> None:
            async with self._applied:
                self._applied.notify_all()

        asyncio.get_running_loop().create_task(notify_all())

    async def get(
        self,
        projection: str,
        tenant: str,
        session: str,
        *,
        min_seq: int = 0,
        timeout_s: float = 5.0,
    ) -> ProjectionView:
        """The live model; SessionNotFound for an unknown session, ProjectionBehind at the
        deadline when it has not reached min_seq."""
        fold = _BY_NAME.get(projection)
        if fold is None:
            raise UnknownProjection(f"no read model named {projection!r}")
        check_identifier(tenant, "tenant")
        check_identifier(session, "session")
        head = await self._ledger.head(tenant, session)  # SessionNotFound before any waiting
        if min_seq > head:
            raise InvalidPage(f"min_seq {min_seq} is past the session's last seq {head}")
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            async with translated("read model"):
                row = await self._pool.fetchrow(
                    query("projection_read_state"), projection, tenant, session
                )
            last_seq = int(row["last_seq"]) if row is not None else 0
            if last_seq >= min_seq:
                state = row["state"] if row is not None else fold.dump(fold.initial())
                return ProjectionView(projection, last_seq, state)
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise ProjectionBehind(
                    f"{projection} of {session!r} is at seq {last_seq}, not yet {min_seq}"
                )
            async with self._applied:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._applied.wait(), min(remaining, _POLL_S))
