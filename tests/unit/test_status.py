from __future__ import annotations

import pytest

from keel_stream.kernel import AttemptOutcome, RunStatus, finish_status
from keel_stream.kernel.status import fresh_budget


@pytest.mark.parametrize(
    ("cancelled", "failed", "attempts", "more_input", "expected"),
    [
        # Cancelled: failed, terminal.
        (True, False, 1, False, RunStatus.FAILED),
        (True, True, 1, False, RunStatus.FAILED),
        # Attempt failed, budget not spent: retry.
        (False, True, 1, False, RunStatus.PENDING),
        (False, True, 2, False, RunStatus.PENDING),
        # Attempt failed, budget spent.
        (False, True, 3, False, RunStatus.FAILED),
        # Success with newer input: pending (moreInput).
        (False, False, 1, True, RunStatus.PENDING),
        # Success, no newer input.
        (False, False, 1, False, RunStatus.DONE),
        (False, False, 3, False, RunStatus.DONE),
    ],
)
def test_status_policy_table(
    cancelled: bool, failed: bool, attempts: int, more_input: bool, expected: RunStatus
) -> None:
    outcome = AttemptOutcome(
        cancelled=cancelled,
        failed=failed,
        attempts=attempts,
        max_attempts=3,
        more_input=more_input,
    )
    assert finish_status(outcome) is expected


@pytest.mark.parametrize(
    ("cancelled", "failed", "attempts", "retriable"),
    [(True, False, 1, True), (False, True, 3, True), (False, True, 1, False)],
)
def test_input_never_presented_makes_the_session_owe_a_run_whatever_the_outcome(
    cancelled: bool, failed: bool, attempts: int, retriable: bool
) -> None:
    outcome = AttemptOutcome(
        cancelled=cancelled,
        failed=failed,
        attempts=attempts,
        max_attempts=3,
        more_input=True,
        retriable=retriable,
    )
    assert finish_status(outcome) is RunStatus.PENDING
    assert fresh_budget(outcome)


def test_the_attempt_budget_counts_failures_not_successes() -> None:
    success = AttemptOutcome(
        cancelled=False, failed=False, attempts=3, max_attempts=3, more_input=False
    )
    failure = AttemptOutcome(
        cancelled=False, failed=True, attempts=1, max_attempts=3, more_input=False
    )
    assert fresh_budget(success)
    assert not fresh_budget(failure)


def test_a_failure_that_is_not_retriable_fails_the_run_with_budget_left() -> None:
    outcome = AttemptOutcome(
        cancelled=False, failed=True, attempts=1, max_attempts=3, more_input=False, retriable=False
    )
    assert finish_status(outcome) is RunStatus.FAILED
