"""The status policy: how a settled attempt decides the run's status."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["AttemptOutcome", "RunStatus", "finish_status"]


class RunStatus(StrEnum):
    """The status of a session's run row."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """What the worker knows when an attempt settles."""

    cancelled: bool
    failed: bool
    attempts: int
    """Attempts made, this one included."""
    max_attempts: int
    more_input: bool
    """Newer input arrived while the attempt ran."""


def finish_status(outcome: AttemptOutcome) -> RunStatus:
    """The policy table, in its order: cancel wins, then failure, then success."""
    if outcome.cancelled:
        # Terminal: re-queueing would make the cancel a no-op. The input stays unanswered
        # in the log and the next run (started by later input) answers it.
        return RunStatus.FAILED
    if outcome.failed:
        if outcome.attempts < outcome.max_attempts:
            return RunStatus.PENDING
        return RunStatus.FAILED
    if outcome.more_input:
        return RunStatus.PENDING
    return RunStatus.DONE
