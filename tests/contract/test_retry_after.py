"""The store contract for a model server's Retry-After: an attempt that ended on a failure asking
to wait settles with that wait, and no worker claims the run again before it has passed."""

from __future__ import annotations

import time

from keel_stream.kernel import CommitRequest, RunStatus
from keel_stream.store import Settlement
from keel_stream.store.protocol import Claim, Runs
from tests.contract.conftest import Adapter
from tests.support.wait import wait_until

WAIT_S = 0.6


async def say(adapter: Adapter, session: str, text: str) -> int:
    request = CommitRequest(
        tenant_id="acme", session_id=session, kind="user.message", payload={"text": text}
    )
    return (await adapter.ledger.commit(request)).seq


def failed_asking_to_wait(seq: int, wait_s: float | None) -> Settlement:
    return Settlement(
        RunStatus.PENDING, 0, accounted_through=seq, fresh_budget=False, retry_after_s=wait_s
    )


async def claimed(runs: Runs, what: str) -> Claim:
    """The first claim that succeeds, polled with a deadline."""
    taken: list[Claim] = []

    async def took() -> bool:
        claim = await runs.claim()
        if claim is not None:
            taken.append(claim)
        return bool(taken)

    await wait_until(took, 10, what, interval_s=0.02)
    return taken[0]


async def test_a_run_is_not_claimed_again_before_the_retry_after_it_settled_with(
    adapter: Adapter,
) -> None:
    seq = await say(adapter, "s1", "hi")
    first = await adapter.runs("w1", 10).claim()
    assert first is not None
    asked = time.monotonic()
    assert await adapter.runs("w1", 10).settle(first, failed_asking_to_wait(seq, WAIT_S)) is (
        RunStatus.PENDING
    )
    again = await claimed(adapter.runs("w2", 10), "the run to be claimable again")
    waited = time.monotonic() - asked
    assert waited >= WAIT_S, f"claimed by another worker {waited:.3f}s after a {WAIT_S}s wait"
    assert (again.session, again.attempts, again.taken_over) == ("s1", 2, False)


async def test_input_during_the_wait_does_not_shorten_it(adapter: Adapter) -> None:
    seq = await say(adapter, "s1", "hi")
    runs = adapter.runs("w1", 10)
    first = await runs.claim()
    assert first is not None
    asked = time.monotonic()
    await runs.settle(first, failed_asking_to_wait(seq, WAIT_S))
    await say(adapter, "s1", "are you there?")
    again = await claimed(runs, "the run to be claimable again")
    waited = time.monotonic() - asked
    assert waited >= WAIT_S, f"claimed {waited:.3f}s after a {WAIT_S}s wait"
    assert again.session == "s1"


async def test_a_waiting_run_does_not_hold_up_the_others(adapter: Adapter) -> None:
    await adapter.ledger.create_session("acme", "s2")
    seq = await say(adapter, "s1", "hi")
    runs = adapter.runs("w1", 10)
    first = await runs.claim()
    assert first is not None
    await runs.settle(first, failed_asking_to_wait(seq, 30))
    await say(adapter, "s2", "hello")
    other = await runs.claim()
    assert other is not None
    assert other.session == "s2", "s1 waits out its 30 s; s2 is claimed meanwhile"
    assert await runs.claim() is None


async def test_a_settle_without_a_wait_leaves_the_run_claimable_at_once(adapter: Adapter) -> None:
    seq = await say(adapter, "s1", "hi")
    runs = adapter.runs("w1", 10)
    first = await runs.claim()
    assert first is not None
    await runs.settle(first, failed_asking_to_wait(seq, None))
    assert await runs.claim() is not None
