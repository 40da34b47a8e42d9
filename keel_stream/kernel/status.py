"""The status policy: how a settled attempt decides the run's status and its attempt budget."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["AttemptOutcome", "RunStatus", "finish_status", "fresh_budget"]


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
    """Failed attempts of this run so far, this one included (the budget counts failures)."""
    max_attempts: int
    more_input: bool
    """Input the attempt never presented to the model is still unanswered (it arrived late)."""
    retriable: bool = True
    """False when the failure is deterministic (say, the provider refused the credentials): no
    retry."""


def finish_status(outcome: AttemptOutcome) -> RunStatus:
    """The policy table. Input the attempt never saw wins: the session owes a run for it
    whatever this attempt's own outcome, so no input is ever swallowed. Then cancel (terminal:
    re-queueing would make the cancel a no-op), then failure, then success."""
    if outcome.more_input:
        return RunStatus.PENDING
    if outcome.cancelled:
        return RunStatus.FAILED
    if outcome.failed:
        if not outcome.retriable or outcome.attempts >= outcome.max_attempts:
            return RunStatus.FAILED
        return RunStatus.PENDING
    return RunStatus.DONE


def fresh_budget(outcome: AttemptOutcome) -> bool:
    """Whether the run's attempt budget starts afresh: after a success (the budget counts
    failures, not successes) and whenever late input makes the session owe a new run."""
    return outcome.more_input or not (outcome.failed or outcome.cancelled)
