"""The agent loop's decisions on the memory store: no servers, each test in well under a second."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from keel_stream.kernel import CommitRequest, Event, account_inputs
from keel_stream.store import MemoryStore
from keel_stream.worker.worker import Worker, WorkerConfig
from tests.support.wait import wait_until
from tests.support.workers import RecordingProvider


@contextlib.asynccontextmanager
async def worker(store: MemoryStore, **options: Any) -> AsyncIterator[WorkerConfig]:
    config = replace(
        WorkerConfig(database_url="memory:"),
        **{"lease_ttl_s": 1.5, "poll_s": 0.02, "drain_grace_s": 1.0, **options},
    )
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(config).run(stop, memory=store))
    try:
        yield config
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def new_store() -> MemoryStore:
    store = MemoryStore()
    await store.create_tenant("acme")
    await store.create_session("acme", "s1")
    return store


async def say(store: MemoryStore, text: str, key: str, delivery: str | None = None) -> int:
    payload: dict[str, Any] = {"text": text}
    if delivery:
        payload["delivery"] = delivery
    request = CommitRequest(
        tenant_id="acme", session_id="s1", kind="user.message", payload=payload, key=key
    )
    return (await store.commit(request)).seq


def status(store: MemoryStore) -> str | None:
    session = store.find("acme", "s1")
    return session.run.status if session is not None and session.run is not None else None


async def settled(store: MemoryStore, *statuses: str) -> None:
    async def done() -> bool:
        return status(store) in statuses

    await wait_until(done, 10, f"the run to settle as {statuses}", interval_s=0.01)


async def log(store: MemoryStore) -> list[Event]:
    return await store.read_events("acme", "s1", limit=1000)


async def test_one_input_gives_the_seed_verified_stream() -> None:
    store = await new_store()
    async with worker(store):
        await say(store, "hello keel", "r1")
        await settled(store, "done")
    events = await log(store)
    assert [e.kind for e in events] == ["user.message", "assistant.message", "run.finished"]
    assert events[1].payload["inputSeqs"] == [1]
    assert events[1].payload["content"] == [{"type": "text", "text": "echo: hello keel"}]
    assert events[2].payload["status"] == "done"


async def test_a_guide_during_a_tool_turn_is_presented_after_the_tool_result() -> None:
    store = await new_store()
    provider = RecordingProvider()
    async with worker(store, provider=provider):
        await say(store, '[[tool:sleep {"seconds": 0.3}]] go', "r1")
        await wait_until(lambda: _asked_for_tools(store), 10, "the tool call", interval_s=0.01)
        guide = await say(store, "and this", "r2", delivery="guide")
        await settled(store, "done")
    events = await log(store)
    roles = [(m["role"], m["seq"]) for m in provider.requests[-1].messages]
    assert roles[-2:] == [("toolResult", guide + 1), ("user", guide)]
    assert [e.payload["status"] for e in events if e.kind == "run.finished"] == ["done"]


async def _asked_for_tools(store: MemoryStore) -> bool:
    return any(e.payload.get("stopReason") == "tool_use" for e in await log(store))


async def test_input_arriving_during_a_cancel_is_answered_by_the_next_attempt() -> None:
    store = await new_store()
    provider = RecordingProvider()

    async def streaming() -> bool:
        return provider.deltas >= 1

    async with worker(store, provider=provider):
        await say(store, "[[slow:200]] one two three four", "r1")
        await wait_until(streaming, 10, "a delta", interval_s=0.01)
        late = await say(store, "still there?", "r2")
        runs = store.runs("api", 1)
        assert await runs.request_cancel("acme", "s1")
        await settled(store, "done")
    events = await log(store)
    assert [e.payload["status"] for e in events if e.kind == "run.finished"] == [
        "cancelled",
        "done",
    ]
    assert account_inputs(events).unanswered == ()
    final = [e for e in events if e.kind == "assistant.message"][-1]
    assert final.payload["inputSeqs"] == [1, late]


async def test_a_takeover_settles_the_dead_attempt_with_one_summary() -> None:
    store = await new_store()
    await say(store, "hello", "r1")
    dead = await store.runs("dead", 0.05).claim()
    assert dead is not None
    async with worker(store):
        await settled(store, "done")
    events = await log(store)
    summaries = [e.payload for e in events if e.kind == "run.finished"]
    assert [(s["status"], s.get("abandonedEpoch"), s["epoch"]) for s in summaries] == [
        ("failed", 1, 2),
        ("done", None, 3),
    ]


async def test_nothing_owed_at_a_claim_ends_the_attempt_with_its_summary() -> None:
    store = await new_store()
    await say(store, "hello", "r1")
    async with worker(store):
        await settled(store, "done")
        session = store.find("acme", "s1")
        assert session is not None
        assert session.run is not None
        session.run.status = "pending"  # a stale queue entry: the log owes nothing
        await settled(store, "done")
    events = await log(store)
    summaries = [e.payload for e in events if e.kind == "run.finished"]
    assert [(s["status"], s["turns"]) for s in summaries] == [("done", 1), ("done", 0)]
