"""commit_many: several commits of one session in order, all or nothing, both adapters."""

from __future__ import annotations

from typing import Any

import pytest

from keel_stream.errors import (
    IdempotencyConflict,
    InvalidPayload,
    InvalidRequest,
    LeaseFenced,
    SessionNotFound,
)
from keel_stream.kernel import CommitRequest, LeaseToken
from keel_stream.store.protocol import Claim
from tests.contract.conftest import Adapter


def request(kind: str, payload: dict[str, Any], **options: Any) -> CommitRequest:
    return CommitRequest(tenant_id="acme", session_id="s1", kind=kind, payload=payload, **options)


def user(text: str, key: str) -> CommitRequest:
    return request("user.message", {"text": text}, key=key)


def call(call_id: str) -> dict[str, Any]:
    return {"type": "toolCall", "id": call_id, "name": "echo", "arguments": {}}


def result(claim: Claim, call_id: str, text: str = "ok") -> CommitRequest:
    payload = {"toolCallId": call_id, "content": [{"type": "text", "text": text}]}
    return request("tool.result", payload, lease=claim.lease)


async def claimed(adapter: Adapter) -> Claim:
    await adapter.ledger.commit(user("hi", "r0"))
    claim = await adapter.runs("w", 10).claim()
    assert claim is not None
    return claim


async def texts(adapter: Adapter) -> list[str]:
    events = await adapter.ledger.read_events("acme", "s1")
    return [str(e.payload.get("text", e.kind)) for e in events]


async def test_a_batch_commits_in_order_with_dense_seqs(adapter: Adapter) -> None:
    first = await adapter.ledger.commit(user("one", "r1"))
    batch = await adapter.ledger.commit_many([user("two", "r2"), user("three", "r3")])
    assert [(s.created, s.seq, s.key) for s in batch] == [(True, 2, "r2"), (True, 3, "r3")]
    assert first.seq == 1
    assert await adapter.ledger.head("acme", "s1") == 3
    assert await texts(adapter) == ["one", "two", "three"]


async def test_a_turn_and_its_tool_results_in_one_batch(adapter: Adapter) -> None:
    claim = await claimed(adapter)
    answer = {"content": [call("c1"), call("c2")], "inputSeqs": [1], "stopReason": "tool_use"}
    batch = await adapter.ledger.commit_many(
        [
            request("assistant.message", answer, key="g1", lease=claim.lease),
            result(claim, "c1"),
            result(claim, "c2"),
        ]
    )
    assert [(s.kind, s.seq, s.key) for s in batch] == [
        ("assistant.message", 2, "g1"), ("tool.result", 3, "c1"), ("tool.result", 4, "c2"),
    ]  # fmt: skip


async def test_a_refusal_anywhere_writes_none_of_the_batch(adapter: Adapter) -> None:
    claim = await claimed(adapter)
    answer = {"content": [call("c1")], "inputSeqs": [1], "stopReason": "tool_use"}
    with pytest.raises(InvalidPayload) as info:
        await adapter.ledger.commit_many(
            [
                request("assistant.message", answer, key="g1", lease=claim.lease),
                result(claim, "c1"),
                result(claim, "c9"),  # no call made it
            ]
        )
    assert info.value.error_code == "tool_call_not_found"
    assert await adapter.ledger.head("acme", "s1") == 1, "nothing of the batch was written"
    again = await adapter.ledger.commit_many(
        [request("assistant.message", answer, key="g1", lease=claim.lease), result(claim, "c1")]
    )
    assert [(s.created, s.seq) for s in again] == [(True, 2), (True, 3)], "its keys are free"


async def test_a_refused_input_does_not_make_a_run_owed(adapter: Adapter) -> None:
    with pytest.raises(IdempotencyConflict):
        await adapter.ledger.commit_many([user("a", "r1"), user("b", "r1")])
    assert await adapter.ledger.head("acme", "s1") == 0
    assert await adapter.runs("w", 10).claim() is None, "the rolled-back input owes nothing"


async def test_a_retry_in_a_batch_returns_its_original_and_leaves_no_gap(
    adapter: Adapter,
) -> None:
    await adapter.ledger.commit(user("one", "r1"))
    batch = await adapter.ledger.commit_many(
        [user("two", "r2"), user("one", "r1"), user("two", "r2"), user("three", "r3")]
    )
    assert [(s.created, s.seq) for s in batch] == [(True, 2), (False, 1), (False, 2), (True, 3)]
    assert await adapter.ledger.head("acme", "s1") == 3
    assert await texts(adapter) == ["one", "two", "three"]
    replay = await adapter.ledger.commit_many([user("two", "r2"), user("three", "r3")])
    assert [(s.created, s.seq) for s in replay] == [(False, 2), (False, 3)]
    assert await adapter.ledger.head("acme", "s1") == 3, "a batch of retries writes nothing"
    assert (await adapter.ledger.commit(user("four", "r4"))).seq == 4


async def test_a_changed_payload_in_a_batch_conflicts_and_writes_nothing(
    adapter: Adapter,
) -> None:
    await adapter.ledger.commit(user("one", "r1"))
    with pytest.raises(IdempotencyConflict):
        await adapter.ledger.commit_many([user("two", "r2"), user("other", "r1")])
    assert await texts(adapter) == ["one"]


async def test_a_stale_lease_fences_the_whole_batch(adapter: Adapter) -> None:
    claim = await claimed(adapter)
    stale = LeaseToken(owner="w", epoch=claim.lease.epoch + 1)
    summary = {"status": "done"}
    with pytest.raises(LeaseFenced):
        await adapter.ledger.commit_many(
            [
                request("run.finished", summary, lease=claim.lease),
                request("run.finished", summary, lease=stale),
            ]
        )
    assert await adapter.ledger.head("acme", "s1") == 1


async def test_a_batch_names_one_existing_session(adapter: Adapter) -> None:
    assert await adapter.ledger.commit_many([]) == []
    await adapter.ledger.create_session("acme", "s2")
    other = CommitRequest(
        tenant_id="acme", session_id="s2", kind="user.message", payload={}, key="x"
    )
    with pytest.raises(InvalidRequest) as info:
        await adapter.ledger.commit_many([user("one", "r1"), other])
    assert info.value.code == "invalid_request"
    missing = CommitRequest(tenant_id="acme", session_id="nope", kind="user.message", payload={})
    with pytest.raises(SessionNotFound):
        await adapter.ledger.commit_many([missing, missing])
    assert await adapter.ledger.head("acme", "s1") == 0
    assert await adapter.ledger.head("acme", "s2") == 0
