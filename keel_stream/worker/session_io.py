"""An attempt's door to its session: reading the log, and commits fenced by the claim's lease."""

from __future__ import annotations

from typing import Any

from keel_stream.errors import LeaseFenced
from keel_stream.kernel import CommitRequest, Event, Kind
from keel_stream.store.protocol import MAX_READ_LIMIT, Claim, Ledger

__all__ = ["Fenced", "SessionIO"]


class Fenced(Exception):
    """The lease is gone: stop without another commit."""


class SessionIO:
    def __init__(self, ledger: Ledger, claim: Claim) -> None:
        self._ledger = ledger
        self.claim = claim

    async def read_log(self, after: int = 0) -> list[Event]:
        """Every event after `after`, in seq order."""
        claim = self.claim
        events: list[Event] = []
        while True:
            page = await self._ledger.read_events(
                claim.tenant, claim.session, after=after, limit=MAX_READ_LIMIT
            )
            events.extend(page)
            if len(page) < MAX_READ_LIMIT:
                return events
            after = page[-1].seq

    async def commit(self, kind: Kind, payload: dict[str, Any]) -> Event:
        """Commit an owner-scoped fact under the claim's lease; Fenced if it is stale."""
        claim = self.claim
        try:
            submission = await self._ledger.commit(
                CommitRequest(
                    tenant_id=claim.tenant,
                    session_id=claim.session,
                    kind=kind.value,
                    payload=payload,
                    lease=claim.lease,
                )
            )
        except LeaseFenced as exc:
            raise Fenced(str(exc)) from exc
        return Event(
            tenant=claim.tenant,
            session=claim.session,
            seq=submission.seq,
            kind=kind.value,
            payload=payload,
            committed_at=submission.committed_at,
        )
