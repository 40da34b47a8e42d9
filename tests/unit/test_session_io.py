"""An attempt's commits through SessionIO: one fact or a batch, fenced by the claim's lease."""

from __future__ import annotations

from typing import Any

import pytest

from keel_stream.kernel import CommitRequest, Kind
from keel_stream.store import MemoryStore
from keel_stream.store.protocol import Claim
from keel_stream.worker.session_io import Fenced, SessionIO


async def claimed(store: MemoryStore) -> Claim:
    await store.create_tenant("acme")
    await store.create_session("acme", "s1")
    await store.commit(
        CommitRequest(
            tenant_id="acme", session_id="s1", kind="user.message", payload={"text": "hi"}
        )
    )
    claim = await store.runs("w", 10).claim()
    assert claim is not None
    return claim


def tool_result(call_id: str) -> dict[str, Any]:
    return {"toolCallId": call_id, "content": [{"type": "text", "text": "ok"}], "isError": False}


async def test_a_turns_tool_results_commit_as_one_batch() -> None:
    store = MemoryStore()
    io = SessionIO(store, await claimed(store))
    calls: list[dict[str, Any]] = [
        {"type": "toolCall", "id": c, "name": "echo", "arguments": {}} for c in ("a", "b")
    ]
    answer = {"content": calls, "inputSeqs": [1], "stopReason": "tool_use", "generationId": "g1"}
    await io.commit(Kind.ASSISTANT_MESSAGE, answer)
    seen: list[int] = []
    store.commit_listeners.append(lambda event: seen.append(event.seq))
    events = await io.commit_many(
        [(Kind.TOOL_RESULT, tool_result("a")), (Kind.TOOL_RESULT, tool_result("b"))]
    )
    assert [(e.seq, e.kind, e.payload["toolCallId"]) for e in events] == [
        (3, "tool.result", "a"), (4, "tool.result", "b"),
    ]  # fmt: skip
    assert seen == [3, 4], "listeners hear each event once the batch committed"
    assert [e.seq for e in await io.read_log()] == [1, 2, 3, 4]


async def test_a_stale_lease_fences_the_batch_and_commits_none() -> None:
    store = MemoryStore()
    claim = await claimed(store)
    await store.runs("w", 10).release(claim)
    assert await store.runs("w2", 10).claim() is not None
    io = SessionIO(store, claim)
    with pytest.raises(Fenced):
        await io.commit_many([(Kind.RUN_FINISHED, {"status": "done"})] * 2)
    assert await store.head("acme", "s1") == 1
