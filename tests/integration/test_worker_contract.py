"""The seed's promises about runs, pinned end to end with a real worker and PostgreSQL:
input is never swallowed, the log replays what the model saw, one summary per settled attempt,
the turn bound follows the status table, compaction, prompt cancel."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from keel_stream.kernel import Event, account_inputs
from keel_stream.projections.transcript import TRANSCRIPT
from keel_stream.store import PostgresLedger
from keel_stream.store.runs import PostgresRuns as RunStore
from keel_stream.worker.providers import OpenAIProvider
from keel_stream.worker.providers.base import ProviderEvent, ProviderRequest
from keel_stream.worker.providers.chat_wire import to_chat_messages
from keel_stream.worker.providers.fake import FakeProvider
from tests.integration.test_worker import answers, assert_each_input_answered_once, say
from tests.support.chat_server import ChatServer, Fault, chat_server
from tests.support.workers import (
    RecordingProvider,
    WorkerProcess,
    log_of,
    run_status,
    settled,
    tool_call_committed,
    worker_task,
)

pytestmark = pytest.mark.usefixtures("one_summary_per_attempt")

STEADY_S = 15
"""Ten lease lifetimes of the test worker (FAST: 1.5 s): renewals, not one long lease."""


def summaries(events: list[Event]) -> list[str]:
    return [e.payload["status"] for e in events if e.kind == "run.finished"]


async def running(pool: asyncpg.Pool, session: str = "s1") -> bool:
    return await run_status(pool, session) == "running"


@pytest.fixture
def streaming(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Set once the fake provider is asked to stream: a cancel asked after it meets a request in
    flight (asked before, the attempt never presented the input and the run stays owed)."""
    started = asyncio.Event()
    real_stream = FakeProvider.stream

    def stream(self: FakeProvider, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        started.set()
        return real_stream(self, request)

    monkeypatch.setattr(FakeProvider, "stream", stream)
    return started


async def test_input_committed_while_an_attempt_is_cancelled_is_answered_once(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    streaming: asyncio.Event,
) -> None:
    async with worker_task(database_dsn):
        await say(ledger, "[[slow:400]] one two three four five six", "r1")
        await asyncio.wait_for(streaming.wait(), 30)
        late = await say(ledger, "are you still there", "r2")
        assert await RunStore(pool, "api", 10).request_cancel("acme", "s1")
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    assert summaries(events) == ["cancelled", "done"]
    assert answers(events)[0].payload["stopReason"] == "aborted"
    assert answers(events)[-1].payload["inputSeqs"] == [1, late]
    assert_each_input_answered_once(events)


async def test_input_during_an_attempt_that_spends_its_budget_is_answered_once(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    await pool.execute(
        "INSERT INTO runs (tenant_id, session_id, status, max_attempts)"
        " VALUES ('acme', 's1', 'done', 1)"
    )
    async with worker_task(database_dsn):
        await say(ledger, '[[tool:sleep {"seconds": 1.5}]] [[fail-after-tool]] go', "r1")
        await tool_call_committed(ledger, "s1")
        late = await say(ledger, "and this one?", "r2")
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    assert summaries(events) == ["failed", "done"], "the spent budget did not swallow the input"
    assert answers(events)[-1].payload["inputSeqs"] == [late]
    assert_each_input_answered_once(events)


async def test_steady_input_over_ten_lease_lifetimes_answers_every_input_and_fails_no_run(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    sent = 0
    async with worker_task(database_dsn):
        began = time.monotonic()
        while time.monotonic() - began < STEADY_S:
            sent += 1
            await say(ledger, f"[[slow:40]] message number {sent}", f"r{sent}")
            await asyncio.sleep(0.25)
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    assert sent >= STEADY_S * 2.5
    assert "failed" not in summaries(events)
    assert account_inputs(events).unanswered == ()
    assert_each_input_answered_once(events)


async def test_a_guide_answered_in_the_run_causes_no_further_attempt(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn):
        await say(ledger, '[[tool:sleep {"seconds": 1}]] look it up', "r1")
        await tool_call_committed(ledger, "s1")
        await say(ledger, "also this", "r2", delivery="guide")
        # Today's rule makes "done" final here; a second attempt would have come before it.
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    assert summaries(events) == ["done"]
    epoch = await pool.fetchval("SELECT lease_epoch FROM runs WHERE session_id = 's1'")
    assert epoch == 1, "one claim: the run was not queued again"


class CrashingOnce(RecordingProvider):
    """Raises an unexpected error from its stream on the first request (a bug, not a failure)."""

    def stream(self, request: ProviderRequest) -> Any:
        if not self.requests:
            self.requests.append(request)
            raise KeyError("a provider bug")
        return super().stream(request)


async def test_a_crashed_attempt_leaves_exactly_one_summary(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn, provider=CrashingOnce()):
        await say(ledger, "hello", "r1")
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    finished = [e.payload for e in events if e.kind == "run.finished"]
    assert [s["status"] for s in finished] == ["failed", "done"]
    assert "attempt crashed: KeyError" in finished[0]["error"]
    assert_each_input_answered_once(events)


async def test_max_turns_with_budget_left_goes_pending_and_resumes(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn, max_turns=1):
        await say(ledger, '[[tool:echo {"x": 1}]] go', "r1")
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    finished = [e.payload for e in events if e.kind == "run.finished"]
    assert [(s["status"], s["stopReason"]) for s in finished] == [
        ("failed", "max_turns"),
        ("done", "end_turn"),
    ]
    assert answers(events)[-1].payload["content"][0]["text"].startswith("done:")


async def test_max_turns_with_the_budget_spent_fails_the_run(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    await pool.execute(
        "INSERT INTO runs (tenant_id, session_id, status, max_attempts)"
        " VALUES ('acme', 's1', 'done', 1)"
    )
    async with worker_task(database_dsn, max_turns=1):
        await say(ledger, '[[tool:echo {"x": 1}]] go', "r1")
        await settled(pool, "s1", "failed")
    events = await log_of(ledger, "s1")
    assert summaries(events) == ["failed"]


def context_before(events: list[Event], answer: Event) -> list[Any]:
    """The model's view the log says the request for `answer` carried."""
    state = TRANSCRIPT.apply_many(TRANSCRIPT.initial(), [e for e in events if e.seq <= answer.seq])
    return list(state.context[:-1])


def assert_requests_replay(events: list[Event], provider: RecordingProvider) -> int:
    by_generation = {r.generation_id: r for r in provider.requests}
    compared = 0
    for answer in answers(events):
        request = by_generation.get(answer.payload["generationId"])
        if request is None or answer.payload["stopReason"] in ("error", "aborted"):
            continue
        assert context_before(events, answer) == list(request.messages), answer.seq
        compared += 1
    return compared


async def test_the_log_replays_what_the_model_saw_for_a_guide_during_a_tool_turn(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    provider = RecordingProvider()
    async with worker_task(database_dsn, provider=provider):
        await say(ledger, '[[tool:sleep {"seconds": 1.5}]] look it up', "r1")
        await tool_call_committed(ledger, "s1")
        guide = await say(ledger, "also check the weather", "r2", delivery="guide")
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    result = next(e for e in events if e.kind == "tool.result")
    assert guide < result.seq, "the guide was committed while the tool ran"
    second = provider.requests[1].messages
    assert [m["role"] for m in second] == ["user", "assistant", "toolResult", "user"]
    assert second[-1]["seq"] == guide, "the guide follows its sibling tool results"
    assert assert_requests_replay(events, provider) == 2


async def test_the_log_replays_what_the_model_saw_after_a_takeover(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    tmp_path: Path,
) -> None:
    first = await WorkerProcess(database_dsn, tmp_path).start()
    try:
        await say(ledger, '[[tool:sleep {"seconds": 3}]] wait for it', "r1")
        await tool_call_committed(ledger, "s1", timeout_s=60)
        guide = await say(ledger, "meanwhile, this", "r2", delivery="guide")
    finally:
        await first.signal(signal.SIGKILL)
    provider = RecordingProvider()
    async with worker_task(database_dsn, provider=provider):
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    last = provider.requests[-1].messages
    assert [m["role"] for m in last] == ["user", "assistant", "toolResult", "user"]
    assert last[-1]["seq"] == guide
    assert assert_requests_replay(events, provider) == 1
    assert_each_input_answered_once(events)


async def test_a_long_session_compacts_and_the_next_request_carries_the_summary(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    provider = RecordingProvider()
    async with worker_task(database_dsn, provider=provider, context_budget_chars=1200):
        for turn in range(8):
            await say(ledger, f"turn {turn}: " + "words " * 20, f"r{turn}")
            await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    compactions = [e for e in events if e.kind == "compaction"]
    assert compactions, "the context outgrew 1,200 characters"
    first = compactions[0]
    after = next(r for r in provider.requests if r.generation_id == _next_generation(events, first))
    summary = {"role": "summary", "seq": first.seq, "content": first.payload["summary"]}
    assert after.messages[0] == summary
    summarised = {m["seq"] for m in provider.summarised[0]}
    assert summarised.isdisjoint(m["seq"] for m in after.messages[1:]), "only later turns"
    assert first.payload["compactedMessages"] == len(summarised)
    assert assert_requests_replay(events, provider) == 8
    assert_each_input_answered_once(events)


def _next_generation(events: list[Event], after: Event) -> str:
    return str(next(e for e in answers(events) if e.seq > after.seq).payload["generationId"])


async def test_cancel_reaches_a_slow_stream_at_once(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    streaming: asyncio.Event,
) -> None:
    # The cancel is asked once the model request streams (asked before it, the attempt never
    # presented the input and the run stays owed: another rule). A long lease: the heartbeat
    # (every 10 s) cannot be what delivers the cancel. The first delta comes after 5 s, so an
    # answer cut with no text at all shows the cancel arrived at once, not at a heartbeat.
    async with worker_task(database_dsn, lease_ttl_s=30):
        await say(ledger, "[[slow:5000]] one two three", "r1")
        await asyncio.wait_for(streaming.wait(), 30)
        assert await RunStore(pool, "api", 10).request_cancel("acme", "s1")
        await settled(pool, "s1", "failed", timeout_s=30)
    events = await log_of(ledger, "s1")
    answer = answers(events)[0].payload
    assert answer["stopReason"] == "aborted"
    kept = [b.get("text") for b in answer.get("content", []) if b.get("type") == "text"]
    assert not any(kept), f"the cancel came after a delta: {kept}"


async def test_cancel_reaches_a_running_tool_at_once(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn, lease_ttl_s=30):
        await say(ledger, '[[tool:sleep {"seconds": 20}]] wait', "r1")
        await tool_call_committed(ledger, "s1")
        asked = time.monotonic()
        assert await RunStore(pool, "api", 10).request_cancel("acme", "s1")
        await settled(pool, "s1", "failed", timeout_s=30)
        took = time.monotonic() - asked
    events = await log_of(ledger, "s1")
    assert summaries(events) == ["cancelled"]
    (result,) = [e.payload for e in events if e.kind == "tool.result"]
    assert (result["isError"], result.get("cancelled")) == (True, True), "closed as cancelled"
    assert took < 1.0, f"cancel took {took:.2f} s"


def assert_chat_requests_replay(events: list[Event], server: ChatServer) -> None:
    """Each completed answer's request, as the chat-completions server received it, equals the
    context folded from the log up to that answer (the server saw no failed requests)."""
    completed = [a for a in answers(events) if a.payload["stopReason"] not in ("error", "aborted")]
    assert len(completed) == len(server.requests)
    for answer, request in zip(completed, server.requests, strict=True):
        assert to_chat_messages(context_before(events, answer)) == request["messages"], answer.seq


async def test_the_context_folded_from_the_log_equals_each_chat_request_with_a_guide(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with chat_server() as (url, server):
        provider = OpenAIProvider(url, "sk-test", "local")
        async with worker_task(database_dsn, provider=provider):
            await say(ledger, "please slow-lookup the weather", "r1")
            await tool_call_committed(ledger, "s1")
            await say(ledger, "in Paris", "r2", delivery="guide")
            await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    roles = [m["role"] for m in server.requests[1]["messages"]]
    assert roles == ["user", "assistant", "tool", "user"], "a guide follows its tool results"
    assert_chat_requests_replay(events, server)


async def test_the_context_folded_from_the_log_equals_each_chat_request_after_a_takeover(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    tmp_path: Path,
) -> None:
    async with chat_server() as (url, server):
        env = {"KEEL_PROVIDER": "openai", "KEEL_OPENAI_BASE_URL": url}
        first = await WorkerProcess(database_dsn, tmp_path, **env).start()
        try:
            await say(ledger, "please slow-lookup the weather", "r1")
            await tool_call_committed(ledger, "s1", timeout_s=60)
            await say(ledger, "in Paris", "r2", delivery="guide")
        finally:
            await first.signal(signal.SIGKILL)
        async with worker_task(database_dsn, provider=OpenAIProvider(url, None, "local")):
            await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    assert [e.kind for e in events].count("tool.result") == 1
    assert [m["role"] for m in server.requests[-1]["messages"]] == [
        "user", "assistant", "tool", "user",
    ]  # fmt: skip
    assert_chat_requests_replay(events, server)
    assert_each_input_answered_once(events)


async def test_a_permanent_provider_failure_fails_the_run_at_once(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(status=401, body='{"error": "bad key"}'))
        async with worker_task(database_dsn, provider=OpenAIProvider(url, "sk-bad", "local")):
            await say(ledger, "hello", "r1")
            await settled(pool, "s1", "failed")
    events = await log_of(ledger, "s1")
    (summary,) = [e.payload for e in events if e.kind == "run.finished"]
    assert summary["status"] == "failed"
    assert summary["error"].startswith("HTTP 401")
    assert "bad key" in summary["error"]
    assert len(server.requests) == 1, "no retry storm"
