"""The agent loop's decisions on the memory store: no servers, each test in well under a second."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

from keel_stream.errors import StoreError
from keel_stream.kernel import CommitRequest, Event, account_inputs
from keel_stream.store import MemoryStore
from keel_stream.tenancy.document import ModelSettings, parse_config
from keel_stream.worker.providers import FakeProvider
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


SETTINGS_DOCUMENT: dict[str, Any] = {
    "settings": {
        "models": {
            "plain": {"provider": "fake", "model": "plain-1"},
            "careful": {
                "provider": "fake",
                "model": "careful-1",
                "systemPrompt": "Think first.",
                "temperature": 0.1,
                "maxTokens": 32,
                "contextBudgetChars": 100000,
            },
        },
        "defaultModel": "plain",
    }
}


def recording_models() -> tuple[dict[str, RecordingProvider], Any]:
    made: dict[str, RecordingProvider] = {}

    def factory(settings: ModelSettings) -> RecordingProvider:
        return made.setdefault(settings.model, RecordingProvider(FakeProvider(settings.model)))

    return made, factory


async def select(store: MemoryStore, text: str, key: str, model: str | None) -> int:
    payload: dict[str, Any] = {"text": text}
    if model is not None:
        payload["selection"] = {"model": model}
    request = CommitRequest(
        tenant_id="acme", session_id="s1", kind="user.message", payload=payload, key=key
    )
    return (await store.commit(request)).seq


async def test_a_selected_model_of_the_boot_document_runs_every_turn_of_the_attempt() -> None:
    store = await new_store()
    made, factory = recording_models()
    boot = parse_config(SETTINGS_DOCUMENT)
    async with worker(store, boot_config=boot, model_providers=factory):
        await select(store, 'use a tool [[tool:echo {"x": 1}]]', "r1", "careful")
        await settled(store, "done")
    events = await log(store)
    answers = [e for e in events if e.kind == "assistant.message"]
    assert len(answers) == 2, "a tool turn, then the answer"
    for answer in answers:
        assert (answer.payload["provider"], answer.payload["model"]) == ("fake", "careful-1")
        assert answer.payload["settings"] == {"model": "careful", "configVersion": "boot"}
    requests = made["careful-1"].requests
    assert [(r.system_prompt, r.temperature, r.max_tokens) for r in requests] == [
        ("Think first.", 0.1, 32),
        ("Think first.", 0.1, 32),
    ]
    assert "plain-1" not in made
    summary = events[-1].payload
    assert (summary["model"], summary["settings"]["model"]) == ("careful-1", "careful")


async def test_an_input_without_selection_uses_the_earlier_selection_then_the_default() -> None:
    store = await new_store()
    _, factory = recording_models()
    async with worker(store, boot_config=parse_config(SETTINGS_DOCUMENT), model_providers=factory):
        await select(store, "first", "r1", "careful")
        await settled(store, "done")
        await select(store, "second", "r2", None)
        await wait_until(lambda: _answers_at_least(store, 2), 10, "the second answer")
        await settled(store, "done")
    answers = [e for e in await log(store) if e.kind == "assistant.message"]
    assert [a.payload["settings"]["model"] for a in answers] == ["careful", "careful"]

    fresh = await new_store()
    async with worker(fresh, boot_config=parse_config(SETTINGS_DOCUMENT), model_providers=factory):
        await select(fresh, "no selection at all", "r1", None)
        await settled(fresh, "done")
    (answer,) = [e for e in await log(fresh) if e.kind == "assistant.message"]
    assert answer.payload["settings"] == {"model": "plain", "configVersion": "boot"}
    assert answer.payload["model"] == "plain-1"


async def _answers_at_least(store: MemoryStore, count: int) -> bool:
    return len([e for e in await log(store) if e.kind == "assistant.message"]) >= count


async def test_an_undeclared_model_fails_the_run_at_once_without_asking_the_model() -> None:
    store = await new_store()
    made, factory = recording_models()
    boot = parse_config(SETTINGS_DOCUMENT)
    async with worker(store, boot_config=boot, model_providers=factory):
        await select(store, "hello", "r1", "vanished")
        await settled(store, "failed")
    events = await log(store)
    kinds = [e.kind for e in events]
    assert kinds == ["user.message", "assistant.message", "run.finished"], "one attempt, no retry"
    refusal = events[1].payload
    assert (refusal["stopReason"], refusal["inputSeqs"], refusal["content"]) == ("error", [1], [])
    assert "'vanished'" in refusal["errorMessage"]
    summary = events[-1].payload
    assert summary["status"] == "failed"
    assert "'vanished'" in summary["error"]
    assert "plain, careful" in summary["error"] or "careful, plain" in summary["error"]
    assert not made


async def test_without_a_document_the_worker_provider_runs_and_no_settings_are_recorded() -> None:
    store = await new_store()
    provider = RecordingProvider()
    async with worker(store, provider=provider):
        await select(store, "hello", "r1", "anything")
        await settled(store, "done")
    answer = (await log(store))[1]
    assert (answer.payload["provider"], answer.payload["model"]) == ("fake", "fake")
    assert "settings" not in answer.payload
    assert provider.requests[0].system_prompt is None


async def test_a_models_context_budget_replaces_the_workers() -> None:
    store = await new_store()
    document = {
        "settings": {
            "models": {
                "fast": {"provider": "fake", "model": "fake-fast"},
                "tight": {"provider": "fake", "model": "fake-tight", "contextBudgetChars": 50},
            },
            "defaultModel": "fast",
        }
    }
    async with worker(store, boot_config=parse_config(document)):
        await select(store, "one", "r1", None)
        await wait_until(lambda: _answers_at_least(store, 1), 10, "the first answer")
        await select(store, "two", "r2", None)
        await wait_until(lambda: _answers_at_least(store, 2), 10, "the second answer")
        await select(store, "three", "r3", "tight")
        await wait_until(lambda: _answers_at_least(store, 3), 10, "the third answer")
        await settled(store, "done")
    events = await log(store)
    answers = [e.payload["model"] for e in events if e.kind == "assistant.message"]
    assert answers == ["fake-fast", "fake-fast", "fake-tight"]
    compactions = [e for e in events if e.kind == "compaction"]
    assert compactions, "the tight model's budget (50 chars) asks for a compaction"
    assert [(c.payload["budgetChars"], c.payload["model"]) for c in compactions] == [
        (50, "fake-tight")
    ]  # the worker's own budget is 0 (never): the fast turns compacted nothing


class _DiesEveryTime(FakeProvider):
    """An attempt that crashes the same way each time, before it presents anything."""

    async def stream(self, request: Any) -> AsyncIterator[Any]:
        raise StoreError("the same failure, every attempt")
        yield  # an async generator that never yields


async def test_an_attempt_that_dies_the_same_way_every_time_spends_the_budget() -> None:
    store = await new_store()
    await say(store, "hello", "r1")
    async with worker(store, provider=_DiesEveryTime(), lease_ttl_s=0.2):
        await settled(store, "failed")
    summaries = [e.payload for e in await log(store) if e.kind == "run.finished"]
    assert [s["status"] for s in summaries] == ["failed"] * 3, "one per attempt of the budget"
    assert all(s["error"].startswith("attempt crashed: StoreError") for s in summaries)


async def test_a_takeover_creates_the_subagents_a_dead_worker_asked_for() -> None:
    store = await new_store()
    await say(store, "go", "r1")
    dead = await store.runs("dead", 0.05).claim()
    assert dead is not None
    session = store.find("acme", "s1")
    assert session is not None
    assert session.run is not None
    session.run.max_attempts = 1  # the takeover settles the dead attempt as the last one
    calls = [{"type": "toolCall", "id": "c1", "name": "delegate", "arguments": {"task": "alpha"}}]
    answer = {"role": "assistant", "content": calls, "inputSeqs": [1], "stopReason": "tool_use",
              "generationId": "g1"}  # fmt: skip
    request = CommitRequest(
        tenant_id="acme", session_id="s1", kind="assistant.message", payload=answer,
        lease=dead.lease,
    )  # fmt: skip
    await store.commit(request)
    async with worker(store):

        async def answered() -> bool:
            return any(e.payload.get("stopReason") == "end_turn" for e in await log(store))

        await wait_until(answered, 10, "the parent's answer after its subagent", interval_s=0.01)
    results = [e.payload for e in await log(store) if e.kind == "tool.result"]
    assert [(r["toolCallId"], r["content"][0]["text"]) for r in results] == [("c1", "echo: alpha")]


async def test_a_call_cancelled_beside_one_waiting_on_a_decision_is_never_run_again() -> None:
    """The cancel ends the attempt cancelled (not waiting): the running call is closed with a
    cancelled result, so the decision's answer later runs only the gated call."""
    from tests.support.decisions import ALL_OUTCOMES, policy

    store = await new_store()
    gated = '[[tool:echo {"gated": true}]] [[tool:sleep {"seconds": 30}]] go'
    async with worker(store, boot_config=policy(echo=ALL_OUTCOMES)):
        await say(store, gated, "r1")
        await wait_until(lambda: _asked_for_tools(store), 10, "the tool calls", interval_s=0.01)
        assert await store.runs("api", 1).request_cancel("acme", "s1")
        await settled(store, "failed", "done")
    events = await log(store)
    (answer,) = [e for e in events if e.kind == "assistant.message"]
    echo, sleep = [b for b in answer.payload["content"] if b["type"] == "toolCall"]
    (result,) = [e.payload for e in events if e.kind == "tool.result"]
    assert (result["toolCallId"], result["isError"], result.get("cancelled")) == (
        sleep["id"], True, True,
    )  # fmt: skip
    assert [e.payload["status"] for e in events if e.kind == "run.finished"] == ["cancelled"]
    assert account_inputs(events).open_decisions == (echo["id"],), "the decision stays open"
