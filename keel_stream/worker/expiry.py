"""Decision expiry: a decision nobody answers in time is answered by the system, as its policy
says (reject or cancel), through the same door as a person's answer (a user.message keyed
decision:<id>), so a late answer loses cleanly (409) and a racing one wins cleanly.

Deadlines are indexed when an attempt settles with decisions open; sweepers (one per worker
process) lease due deadlines row by row, so two never handle the same one at once, and the log
decides: a decision already answered or resolved is only closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from datetime import datetime
from typing import Any, Final

from keel_stream.clock import Clock, utc_now
from keel_stream.errors import IdempotencyConflict, StoreUnavailable
from keel_stream.kernel import CommitRequest, Delivery, Event, Kind
from keel_stream.kernel.decisions import DecisionState, answer_key, decisions_of
from keel_stream.logs import get_logger
from keel_stream.store.deadlines import Deadline, Deadlines
from keel_stream.store.protocol import Ledger
from keel_stream.store.reading import whole_log

__all__ = ["DecisionSweeper", "deadlines_of", "expiry_answer", "has_decisions"]

EXPIRED_REASON: Final = "the decision expired unanswered"
SYSTEM: Final = "system:expiry"


def deadlines_of(tenant: str, session: str, log: Iterable[Event]) -> list[Deadline]:
    """The deadlines of the log's open decisions."""
    return [
        Deadline(tenant, session, d.id, datetime.fromisoformat(d.expires_at),
                 str(d.approval.get("onExpire", "reject")))
        for d in decisions_of(log).values()
        if d.state == DecisionState.OPEN
    ]  # fmt: skip


def has_decisions(log: Iterable[Event]) -> bool:
    """Whether any answer of the log gated a call (so its deadlines need keeping)."""
    return any(
        e.kind == Kind.ASSISTANT_MESSAGE
        and e.payload.get("stopReason") == "tool_use"
        and any(isinstance(b, dict) and "approval" in b for b in e.payload.get("content") or ())
        for e in log
    )


def expiry_answer(decision_id: str, digest: str, on_expire: str) -> dict[str, Any]:
    return {
        "requestId": answer_key(decision_id),
        "delivery": Delivery.QUEUE.value,
        "decision": {
            "id": decision_id,
            "outcome": on_expire,
            "argsDigest": digest,
            "reason": EXPIRED_REASON,
            "answeredBy": SYSTEM,
            "system": True,
        },
    }


class DecisionSweeper:
    def __init__(
        self,
        ledger: Ledger,
        deadlines: Deadlines,
        owner: str,
        clock: Clock = utc_now,
        interval_s: float = 1.0,
        lease_s: float = 30.0,
        batch: int = 50,
    ) -> None:
        self._ledger = ledger
        self._deadlines = deadlines
        self._owner = owner
        self._clock = clock
        self._interval_s = interval_s
        self._lease_s = lease_s
        self._batch = batch
        self._log = get_logger("worker").bind(component="decision-expiry")

    async def sweep_once(self) -> int:
        """Answer the due decisions that are still open; how many were answered."""
        due = await self._deadlines.claim_due(
            self._clock(), self._owner, self._lease_s, self._batch
        )
        answered = 0
        for deadline in due:
            answered += await self._expire(deadline)
            await self._deadlines.close(deadline.tenant, deadline.session, deadline.decision)
        return answered

    async def _expire(self, deadline: Deadline) -> int:
        log = await whole_log(self._ledger, deadline.tenant, deadline.session)
        decision = decisions_of(log).get(deadline.decision)
        if decision is None or decision.state != DecisionState.OPEN:
            return 0
        digest = str(decision.approval.get("argsDigest"))
        payload = expiry_answer(decision.id, digest, deadline.on_expire)
        request = CommitRequest(
            tenant_id=deadline.tenant, session_id=deadline.session, kind=Kind.USER_MESSAGE,
            payload=payload, key=payload["requestId"],
        )  # fmt: skip
        try:
            await self._ledger.commit(request)
        except IdempotencyConflict:
            return 0  # a person answered first: their answer stands
        self._log.info("decision expired", session=deadline.session, decision=decision.id)
        return 1

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                while await self.sweep_once() == self._batch:
                    pass
            except StoreUnavailable as exc:
                self._log.warning("sweep failed", error=str(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self._interval_s)
