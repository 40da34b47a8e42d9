"""The store contract: commit rules, idempotency, fences, dense seq, claims and leases."""

from __future__ import annotations

from typing import Any

import pytest

from keel_stream.errors import (
    ExternalSession,
    ExternalSessionClosed,
    IdempotencyConflict,
    InvalidPage,
    InvalidPayload,
    LeaseFenced,
    NotExternalSession,
    PayloadTooLarge,
    SessionExists,
    SessionNotFound,
    TenantExists,
    TenantNotFound,
)
from keel_stream.kernel import CommitRequest, LeaseToken, RunStatus
from keel_stream.kernel.limits import MAX_EVENT_BYTES, event_size
from keel_stream.store import ExternalMarkers, ExternalStatus, Settlement
from keel_stream.store.protocol import Claim
from tests.contract.conftest import Adapter
from tests.support.wait import wait_until


def request(kind: str, payload: dict[str, Any], **options: Any) -> CommitRequest:
    return CommitRequest(tenant_id="acme", session_id="s1", kind=kind, payload=payload, **options)


async def say(adapter: Adapter, text: str, key: str, **payload: Any) -> int:
    sub = await adapter.ledger.commit(request("user.message", {"text": text, **payload}, key=key))
    return sub.seq


async def answer(adapter: Adapter, claim: Claim, seqs: list[int], generation: str) -> int:
    payload = {"content": [], "inputSeqs": seqs, "stopReason": "end_turn"}
    committed = await adapter.ledger.commit(
        request("assistant.message", payload, key=generation, lease=claim.lease)
    )
    return committed.seq


def settled_through(seq: int, status: RunStatus = RunStatus.DONE) -> Settlement:
    return Settlement(status, read_watermark=seq, accounted_through=seq, fresh_budget=True)


async def test_seq_is_dense_and_reads_page_in_order(adapter: Adapter) -> None:
    seqs = [await say(adapter, f"m{i}", f"r{i}") for i in range(5)]
    assert seqs == [1, 2, 3, 4, 5]
    page = await adapter.ledger.read_events("acme", "s1", after=2, limit=2)
    assert [e.seq for e in page] == [3, 4]
    assert await adapter.ledger.head("acme", "s1") == 5
    with pytest.raises(InvalidPage):
        await adapter.ledger.read_events("acme", "s1", after=-1)
    with pytest.raises(SessionNotFound):
        await adapter.ledger.read_events("acme", "nope")


async def test_tenants_and_sessions_are_unique(adapter: Adapter) -> None:
    with pytest.raises(TenantExists):
        await adapter.ledger.create_tenant("acme")
    with pytest.raises(SessionExists):
        await adapter.ledger.create_session("acme", "s1")
    with pytest.raises(TenantNotFound):
        await adapter.ledger.create_session("ghost", "s1")
    assert len(await adapter.ledger.create_session("acme")) == 36, "a generated uuid"


async def test_a_retry_returns_the_original_and_a_changed_payload_conflicts(
    adapter: Adapter,
) -> None:
    first = await adapter.ledger.commit(request("user.message", {"text": "a", "x": 1}, key="k"))
    again = await adapter.ledger.commit(request("user.message", {"x": 1.0, "text": "a"}, key="k"))
    assert (first.created, again.created, again.seq) == (True, False, first.seq)
    with pytest.raises(IdempotencyConflict):
        await adapter.ledger.commit(request("user.message", {"text": "b"}, key="k"))
    await adapter.ledger.create_session("acme", "s2")
    other = CommitRequest(
        tenant_id="acme", session_id="s2", kind="user.message", payload={"text": "a"}, key="k"
    )
    assert (await adapter.ledger.commit(other)).created, "the key's scope is the session"


async def test_the_class_gate(adapter: Adapter) -> None:
    await adapter.ledger.create_session("acme", "ext", external=ExternalMarkers(backend="dsh"))
    native_event = {"backend": "dsh", "externalRef": "r1"}
    with pytest.raises(NotExternalSession):
        await adapter.ledger.commit(request("external.event", native_event, key="e1"))
    edge = CommitRequest(
        tenant_id="acme", session_id="ext", kind="user.message", payload={"text": "hi"}
    )
    with pytest.raises(ExternalSession):
        await adapter.ledger.commit(edge)
    external = CommitRequest(
        tenant_id="acme", session_id="ext", kind="external.event", payload=native_event, key="e1"
    )
    assert (await adapter.ledger.commit(external)).seq == 1


async def test_the_class_gate_refuses_every_class_where_the_kernel_does_not_admit_it(
    adapter: Adapter,
) -> None:
    closed = ExternalMarkers(backend="dsh", status=ExternalStatus.CLOSED)
    await adapter.ledger.create_session("acme", "ext", external=ExternalMarkers(backend="dsh"))
    await adapter.ledger.create_session("acme", "shut", external=closed)
    lease = LeaseToken(owner="w", epoch=1)
    backend_event = {"backend": "dsh", "externalRef": "r1"}

    def to(session: str, kind: str, payload: dict[str, Any], **options: Any) -> CommitRequest:
        return CommitRequest(
            tenant_id="acme", session_id=session, kind=kind, payload=payload, **options
        )

    with pytest.raises(ExternalSession, match="no native owner"):
        await adapter.ledger.commit(to("ext", "run.finished", {"status": "done"}, lease=lease))
    with pytest.raises(ExternalSessionClosed):
        await adapter.ledger.commit(to("shut", "external.event", backend_event, key="e1"))
    with pytest.raises(ExternalSession, match="owned externally"):
        await adapter.ledger.commit(to("shut", "user.message", {"text": "hi"}))
    assert await adapter.ledger.head("acme", "ext") == await adapter.ledger.head("acme", "shut")
    assert await adapter.ledger.head("acme", "shut") == 0, "a refused commit writes nothing"


async def test_owner_scoped_commits_are_fenced_by_the_current_lease(adapter: Adapter) -> None:
    stranger = LeaseToken(owner="w", epoch=1)
    summary = {"status": "done"}
    with pytest.raises(LeaseFenced):
        await adapter.ledger.commit(request("run.finished", summary, lease=stranger))
    await say(adapter, "hi", "r1")
    claim = await adapter.runs("w", 10).claim()
    assert claim is not None
    await adapter.ledger.commit(request("run.finished", summary, lease=claim.lease))
    stale = LeaseToken(owner="w", epoch=claim.lease.epoch + 1)
    with pytest.raises(LeaseFenced):
        await adapter.ledger.commit(request("run.finished", summary, lease=stale))


async def test_a_tool_result_must_answer_a_committed_call(adapter: Adapter) -> None:
    await say(adapter, "hi", "r1")
    claim = await adapter.runs("w", 10).claim()
    assert claim is not None
    result = {"toolCallId": "c1", "content": []}
    with pytest.raises(InvalidPayload):
        await adapter.ledger.commit(request("tool.result", result, lease=claim.lease))
    call = {"type": "toolCall", "id": "c1", "name": "echo", "arguments": {}}
    payload = {"content": [call], "inputSeqs": [1], "stopReason": "tool_use"}
    await adapter.ledger.commit(request("assistant.message", payload, key="g1", lease=claim.lease))
    assert (await adapter.ledger.commit(request("tool.result", result, lease=claim.lease))).created


async def test_a_guide_without_an_active_attempt_is_written_as_queue(adapter: Adapter) -> None:
    await say(adapter, "a guide", "r1", delivery="guide")
    claim = await adapter.runs("w", 10).claim()
    assert claim is not None
    await say(adapter, "a guide", "r2", delivery="guide")
    first, second = await adapter.ledger.read_events("acme", "s1")
    assert (first.payload["delivery"], second.payload["delivery"]) == ("queue", "guide")


async def test_input_makes_a_run_owed_and_claims_take_turns(adapter: Adapter) -> None:
    runs = adapter.runs("w", 10)
    assert await runs.claim() is None, "nothing owed yet"
    await say(adapter, "hi", "r1")
    claim = await runs.claim()
    assert claim is not None
    assert (claim.session, claim.lease.epoch, claim.attempts, claim.taken_over) == (
        "s1", 1, 1, False,
    )  # fmt: skip
    assert await runs.claim() is None, "a running run with a live lease is not claimable"
    assert (await runs.heartbeat(claim)).held


async def test_an_external_run_row_is_never_claimed(adapter: Adapter) -> None:
    await adapter.ledger.create_session("acme", "ext", external=ExternalMarkers(backend="dsh"))
    await say(adapter, "hi", "r1")
    claim = await adapter.runs("w", 10).claim()
    assert claim is not None
    assert claim.session == "s1"


async def test_an_expired_lease_is_taken_over_at_a_higher_epoch(adapter: Adapter) -> None:
    await say(adapter, "hi", "r1")
    first = await adapter.runs("w1", 0.2).claim()
    assert first is not None
    assert await adapter.runs("w2", 10).request_cancel("acme", "s1")
    second_runs = adapter.runs("w2", 10)
    taken: list[Claim] = []

    async def taken_over() -> bool:
        claim = await second_runs.claim()
        if claim is not None:
            taken.append(claim)
        return bool(taken)

    await wait_until(taken_over, 10, "the first lease to expire")
    (second,) = taken
    assert (second.lease.epoch, second.attempts) == (2, 1), "a takeover starts no attempt"
    assert second.taken_over
    assert second.cancel_requested
    assert not (await adapter.runs("w1", 10).heartbeat(first)).held
    assert await adapter.runs("w1", 10).settle(first, settled_through(1)) is None
    with pytest.raises(LeaseFenced):
        await answer(adapter, first, [1], "g1")


async def test_settling_with_late_input_makes_the_run_owed_again(adapter: Adapter) -> None:
    runs = adapter.runs("w", 10)
    await say(adapter, "hi", "r1")
    claim = await runs.claim()
    assert claim is not None
    await answer(adapter, claim, [1], "g1")
    late = await say(adapter, "late", "r2")
    failed = Settlement(RunStatus.FAILED, read_watermark=1, accounted_through=2, fresh_budget=False)
    assert await runs.settle(claim, failed) is RunStatus.PENDING
    again = await runs.claim()
    assert again is not None
    assert again.attempts == 1, "late input gives a fresh budget"
    assert await runs.settle(again, settled_through(late)) is RunStatus.DONE


async def test_failures_spend_the_budget_and_successes_reset_it(adapter: Adapter) -> None:
    runs = adapter.runs("w", 10)
    await say(adapter, "hi", "r1")
    for attempt in (1, 2):
        claim = await runs.claim()
        assert claim is not None
        assert claim.attempts == attempt
        retry = Settlement(RunStatus.PENDING, 0, accounted_through=1, fresh_budget=False)
        assert await runs.settle(claim, retry) is RunStatus.PENDING
    claim = await runs.claim()
    assert claim is not None
    assert claim.attempts == 3
    more = Settlement(RunStatus.PENDING, 1, accounted_through=1, fresh_budget=True)
    assert await runs.settle(claim, more) is RunStatus.PENDING
    claim = await runs.claim()
    assert claim is not None
    assert claim.attempts == 1


async def test_a_released_attempt_is_pending_and_not_counted(adapter: Adapter) -> None:
    runs = adapter.runs("w", 10)
    await say(adapter, "hi", "r1")
    claim = await runs.claim()
    assert claim is not None
    assert await runs.release(claim)
    again = await runs.claim()
    assert again is not None
    assert (again.attempts, again.lease.epoch) == (1, 2)
    assert not await runs.request_cancel("acme", "nope"), "no running attempt there"


async def test_an_event_over_the_size_limit_is_refused_and_writes_nothing(
    adapter: Adapter,
) -> None:
    payload: dict[str, Any] = {"requestId": "big", "text": ""}
    payload["text"] = "x" * (MAX_EVENT_BYTES - event_size(payload))
    with pytest.raises(PayloadTooLarge):
        await adapter.ledger.commit(
            request("user.message", {**payload, "text": "x" + payload["text"]}, key="big")
        )
    assert await adapter.ledger.head("acme", "s1") == 0, "nothing was written"
    at_limit = await adapter.ledger.commit(request("user.message", payload, key="big"))
    assert at_limit.seq == 1
    (stored,) = await adapter.ledger.read_events("acme", "s1")
    assert event_size(stored.payload) == MAX_EVENT_BYTES
