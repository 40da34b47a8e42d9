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

from keel_stream.errors import InvalidPage, ProjectionBehind, UnknownProjection
from keel_stream.kernel.commits import check_identifier
from keel_stream.kernel.forks import check_history_length
from keel_stream.projections import ALL, Folded
from keel_stream.projections import fold as fold_events
from keel_stream.store.backend import Store
from keel_stream.store.projection_state import ProjectionStore, Subscription
from keel_stream.store.protocol import MAX_READ_LIMIT, Ledger

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
    """Reads live read models; `start()` enables wake-ups by the projector's notifications."""

    def __init__(self, store: ProjectionStore, ledger: Ledger) -> None:
        self._store = store
        self._ledger = ledger
        self._subscription: Subscription | None = None
        self._applied = asyncio.Event()

    @classmethod
    def of(cls, store: Store) -> ReadModels:
        return cls(store.projections(), store.ledger())

    async def start(self) -> None:
        subscription = self._store.notifications(self._on_applied)
        await subscription.start()
        self._subscription = subscription

    async def close(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            await subscription.stop()

    def _on_applied(self, _what: str) -> None:
        # Wakes every reader waiting on the current event; later readers wait on a new one.
        applied, self._applied = self._applied, asyncio.Event()
        applied.set()

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
            applied = self._applied  # taken before the read, so no notification falls between
            stored = await self._store.read_state(projection, tenant, session)
            last_seq = stored.last_seq if stored is not None else 0
            if last_seq >= min_seq:
                state = stored.state if stored is not None else fold.dump(fold.initial())
                return ProjectionView(projection, last_seq, state)
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise ProjectionBehind(
                    f"{projection} of {session!r} is at seq {last_seq}, not yet {min_seq}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(applied.wait(), min(remaining, _POLL_S))

    async def as_of(
        self, projection: str, tenant: str, session: str, at_seq: int
    ) -> ProjectionView:
        """The model as it was at seq `at_seq`: the projection's pure fold of the session's
        first at_seq events, read from the ledger (InvalidPage past the head, HistoryTooLong
        over MAX_HISTORY_EVENTS)."""
        fold = _BY_NAME.get(projection)
        if fold is None:
            raise UnknownProjection(f"no read model named {projection!r}")
        head = await self._ledger.head(tenant, session)
        if at_seq > head:
            raise InvalidPage(f"atSeq {at_seq} is past the session's last seq {head}")
        check_history_length(at_seq)
        folded = Folded(0, fold.initial())
        while folded.last_seq < at_seq:
            page = await self._ledger.read_events(
                tenant,
                session,
                after=folded.last_seq,
                limit=min(MAX_READ_LIMIT, at_seq - folded.last_seq),
            )
            folded = fold_events(fold, page, folded)
        return ProjectionView(projection, at_seq, fold.dump(folded.state))
