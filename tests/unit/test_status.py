from __future__ import annotations

import pytest

from keel_stream.kernel import AttemptOutcome, RunStatus, finish_status


@pytest.mark.parametrize(
    ("cancelled", "failed", "attempts", "more_input", "expected"),
    [
        # Cancelled: failed, terminal, whatever else is true.
        (True, False, 1, False, RunStatus.FAILED),
        (True, True, 1, True, RunStatus.FAILED),
        (True, False, 1, True, RunStatus.FAILED),
        # Attempt failed, budget not spent: retry.
        (False, True, 1, False, RunStatus.PENDING),
        (False, True, 2, True, RunStatus.PENDING),
        # Attempt failed, budget spent.
        (False, True, 3, False, RunStatus.FAILED),
        (False, True, 3, True, RunStatus.FAILED),
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
