"""An attempt's door to its session: reading the log, and commits fenced by the claim's lease."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from keel_stream.errors import LeaseFenced
from keel_stream.kernel import CommitRequest, Event, Kind
from keel_stream.store.protocol import Claim, Ledger
from keel_stream.store.reading import whole_log

__all__ = ["Fenced", "SessionIO"]


class Fenced(Exception):
    """The lease is gone: stop without another commit."""


class SessionIO:
    def __init__(self, ledger: Ledger, claim: Claim) -> None:
        self._ledger = ledger
        self.claim = claim

    async def read_log(self, after: int = 0) -> list[Event]:
        """Every event after `after`, in seq order."""
        return await whole_log(self._ledger, self.claim.tenant, self.claim.session, after)

    async def commit(self, kind: Kind, payload: dict[str, Any]) -> Event:
        """Commit an owner-scoped fact under the claim's lease; Fenced if it is stale."""
        (event,) = await self.commit_many([(kind, payload)])
        return event

    async def commit_many(self, facts: Sequence[tuple[Kind, dict[str, Any]]]) -> list[Event]:
        """Commit several owner-scoped facts in order, all or nothing, in one round trip (a
        turn's tool results); Fenced if the lease is stale, and then none is committed."""
        claim = self.claim
        requests = [
            CommitRequest(
                tenant_id=claim.tenant,
                session_id=claim.session,
                kind=kind.value,
                payload=payload,
                lease=claim.lease,
            )
            for kind, payload in facts
        ]
        try:
            if len(requests) == 1:  # may share a group commit with other attempts' commits
                submissions = [await self._ledger.commit(requests[0])]
            else:
                submissions = await self._ledger.commit_many(requests)
        except LeaseFenced as exc:
            raise Fenced(str(exc)) from exc
        return [
            Event(
                tenant=claim.tenant,
                session=claim.session,
                seq=submission.seq,
                kind=kind.value,
                payload=payload,
                committed_at=submission.committed_at,
            )
            for (kind, payload), submission in zip(facts, submissions, strict=True)
        ]
