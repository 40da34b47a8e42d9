"""Forks: a new session whose log starts with another session's first N events.

Seed 002: replay/fork initialises a new session from an existing log. A fork copies the events
as they were committed (kind, payload, idempotency key, the digest a retry is compared with);
it never re-runs a tool or a model. The kernel checks every copy as it would a commit (the kind,
the payload rules, the size) and decides whether the fork owes a run; the store writes the
copies in one transaction with their outbox rows. Each copy records where it came from in its
event metadata; the session records what it forks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from keel_stream.errors import ExternalSession, HistoryTooLong, InvalidRequest
from keel_stream.kernel.inputs import InputTally
from keel_stream.kernel.limits import check_event_size
from keel_stream.kernel.types import EventLike
from keel_stream.kernel.validation import validate_payload
from keel_stream.kernel.vocabulary import CommitClass, spec_for

__all__ = [
    "FORKED_FROM",
    "MAX_HISTORY_EVENTS",
    "ORIGIN",
    "Fork",
    "ForkChecker",
    "check_fork_point",
    "check_history_length",
    "copy_metadata",
]

MAX_HISTORY_EVENTS: Final = 50_000
"""The most events one fork copies, or one read as of a seq folds (either is O(N) work)."""

FORKED_FROM: Final = "forkedFrom"
"""Metadata of a copy: the event it copies ({session, seq, committedAt})."""
ORIGIN: Final = "origin"
"""Metadata of a copy: the first session of a chain of forks it comes from ({session, seq})."""


@dataclass(frozen=True, slots=True)
class Fork:
    """What a fork made: the new session, what it forks, and the run it owes (if any)."""

    session_id: str
    fork_of: str
    at_seq: int
    owed_input_seq: int | None
    """The input the fork's run answers; None: nothing is owed, no run is queued."""


def check_fork_point(at_seq: int | None, head: int, *, external: bool) -> int:
    """The seq a fork copies through (the head when not given); refuses what cannot be forked."""
    if external:
        raise ExternalSession(
            "an external session's state is owned by its backend: it cannot be forked here"
        )
    point = head if at_seq is None else at_seq
    if point < 0 or point > head:
        raise InvalidRequest(f"atSeq {point} is outside the source's log (0..{head})")
    check_history_length(point)
    return point


def check_history_length(events: int) -> None:
    if events > MAX_HISTORY_EVENTS:
        raise HistoryTooLong(
            f"{events} events is more than one fork or point-in-time read takes "
            f"({MAX_HISTORY_EVENTS})"
        )


class ForkChecker:
    """Checks the copies in seq order as the kernel checks commits, and tallies the inputs."""

    def __init__(self) -> None:
        self._tally = InputTally()
        self._next = 1

    def check(self, events: Iterable[EventLike]) -> None:
        batch = list(events)
        for event in batch:
            if event.seq != self._next:
                raise InvalidRequest(f"fork copy expected seq {self._next}, got {event.seq}")
            spec = spec_for(event.kind)
            if spec.commit_class is CommitClass.EXTERNAL:
                raise ExternalSession("external events cannot be copied into a native session")
            validate_payload(spec.kind, event.payload)
            check_event_size(event.payload)
            self._next += 1
        self._tally = self._tally.observe_many(batch)

    def owed_input_seq(self) -> int | None:
        """The fork owes a run when its copied log leaves a turn to take: an input no answer
        consumed, or a latest answer that failed or asked for tools (seed: owedTurn)."""
        account = self._tally.account()
        if not account.needs_turn:
            return None
        inputs = self._tally.inputs
        return inputs[-1] if inputs else None


def copy_metadata(
    source: str, seq: int, committed_at: datetime, metadata: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The metadata of the copy of source's event `seq`: the event it copies, and the origin of
    the chain (kept when the source is itself a fork)."""
    origin = (metadata or {}).get(ORIGIN) or {"session": source, "seq": seq}
    return {
        FORKED_FROM: {"session": source, "seq": seq, "committedAt": committed_at.isoformat()},
        ORIGIN: dict(origin),
    }
