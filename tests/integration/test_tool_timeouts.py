"""Bounded tools and providers through the worker, and the OpenAI-compatible provider against
a local server that stalls: a refused or timed-out call is an isError result and the run goes
on to its next model turn; a stalled stream is cut and the run is retried like any transient
provider failure."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncpg
import pytest

from keel_stream.kernel import CommitRequest, Event
from keel_stream.retry import RetryPolicy
from keel_stream.store import PostgresLedger
from keel_stream.worker.limits import StreamLimits
from keel_stream.worker.providers import (
    Finish,
    OpenAIProvider,
    ProviderEvent,
    ProviderRequest,
    TextDelta,
)
from tests.support.workers import log_of, settled, worker_task

pytestmark = pytest.mark.usefixtures("one_summary_per_attempt")

GUARD_S = 30.0
"""How long a stream may take before the test counts it as hung (today's main hangs)."""
FAST_RETRY = RetryPolicy(attempts=3, initial_s=0.01, maximum_s=0.05)


async def say(ledger: PostgresLedger, text: str) -> None:
    await ledger.commit(
        CommitRequest(
            tenant_id="acme", session_id="s1", kind="user.message", payload={"text": text}
        )
    )


def outcome(events: Sequence[Event]) -> list[tuple[str, Any]]:
    return [
        (e.kind, e.payload["status"] if e.kind == "run.finished" else e.payload.get("stopReason"))
        for e in events
    ]


def tool_result(events: Sequence[Event]) -> tuple[str, bool]:
    (result,) = [e for e in events if e.kind == "tool.result"]
    return result.payload["content"][0]["text"], result.payload["isError"]


async def test_a_sleep_with_nan_seconds_is_never_run_and_the_run_goes_on(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn):
        await say(ledger, '[[tool:sleep {"seconds": NaN}]] wait')
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    (call,) = events[1].payload["content"]
    assert (call["name"], call["arguments"]) == ("sleep", {})
    assert call["invalidArguments"] == '{"seconds": NaN}', "NaN is not JSON: kept as sent"
    assert tool_result(events) == ('the arguments are not a JSON object: {"seconds": NaN}', True)
    assert outcome(events)[1:] == [
        ("assistant.message", "tool_use"),
        ("tool.result", None),
        ("assistant.message", "end_turn"),
        ("run.finished", "done"),
    ]


async def test_a_tool_call_that_times_out_is_an_error_result_and_the_next_turn_follows(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEEL_TOOL_TIMEOUT_S", "0.5")
    async with worker_task(database_dsn):
        await say(ledger, '[[tool:sleep {"seconds": 120}]] wait')
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    assert tool_result(events) == ("tool 'sleep' timed out after 0.5 s", True)
    assert outcome(events)[1:] == [
        ("assistant.message", "tool_use"),
        ("tool.result", None),
        ("assistant.message", "end_turn"),
        ("run.finished", "done"),
    ]
    answer = events[-2].payload["content"][0]["text"]
    assert answer == "done: tool 'sleep' timed out after 0.5 s", "the model saw the error"
    (summary,) = [e.payload for e in events if e.kind == "run.finished"]
    (timing,) = summary["toolTimings"]
    assert timing["name"] == "sleep"


# -- a chat-completions server that stalls ---------------------------------------------------------

KEEPALIVE = b": keep-alive\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
    body = {"id": "c1", "object": "chat.completion.chunk", "model": "local",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return f"data: {json.dumps(body)}\n\n".encode()


ANSWER = [
    _chunk({"role": "assistant", "content": "all "}),
    _chunk({"content": "good"}),
    _chunk({}, "stop"),
    b"data: [DONE]\n\n",
]


@dataclass(frozen=True)
class Script:
    """One response: these SSE bytes, then (with ``then``) forever either keep-alive comments
    (``"keepalive"``: bytes arrive but no event) or text deltas (``"trickle"``)."""

    chunks: Sequence[bytes] = tuple(ANSWER)
    then: str | None = None


@dataclass
class StallingServer:
    """Streams chat completions by script (first in, first out; the whole answer when none is
    left) over raw HTTP/1.1, the body ending when the connection closes."""

    scripts: deque[Script] = field(default_factory=deque)
    requests: int = 0
    stopping: bool = False
    handlers: set[asyncio.Task[None]] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            self.requests += 1
            script = self.scripts.popleft() if self.scripts else Script()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            )
            for chunk in script.chunks:
                writer.write(chunk)
                await writer.drain()
            while script.then is not None and not self.stopping:
                writer.write(KEEPALIVE if script.then == "keepalive" else _chunk({"content": "."}))
                await writer.drain()
                await asyncio.sleep(0.05)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away: what a cut stream does
        finally:
            writer.close()
            self.handlers.discard(task)


@contextlib.asynccontextmanager
async def stalling_server() -> AsyncIterator[tuple[str, StallingServer]]:
    state = StallingServer()
    server = await asyncio.start_server(state.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1", state
    finally:
        server.close()
        state.stopping = True  # each handler ends at its next beat
        await asyncio.gather(*state.handlers)
        await server.wait_closed()


def provider(url: str, stall_s: float = 0.3, total_s: float = GUARD_S) -> OpenAIProvider:
    limits = StreamLimits(stall_s=stall_s, total_s=total_s)
    return OpenAIProvider(url, "sk-test", "local", retry=FAST_RETRY, limits=limits)


async def events_of(openai: OpenAIProvider) -> list[ProviderEvent]:
    request = ProviderRequest("t", "s", "g1", [{"role": "user", "content": "hi"}])

    async def collect() -> list[ProviderEvent]:
        return [e async for e in openai.stream(request)]

    return await asyncio.wait_for(collect(), GUARD_S)


async def test_a_stream_that_sends_no_event_is_cut_and_retried() -> None:
    async with stalling_server() as (url, server):
        server.scripts.append(Script(chunks=(), then="keepalive"))
        events = await events_of(provider(url))
    assert events == [TextDelta("all "), TextDelta("good"), Finish("end_turn")]
    assert server.requests == 2, "the stalled request was tried again"


async def test_a_stream_that_stalls_after_text_ends_the_answer_with_a_retriable_error() -> None:
    async with stalling_server() as (url, server):
        server.scripts.append(Script(chunks=ANSWER[:1], then="keepalive"))
        events = await events_of(provider(url))
    assert events[0] == TextDelta("all ")
    finish = events[-1]
    assert isinstance(finish, Finish)
    assert (finish.stop_reason, finish.retriable) == ("error", True)
    assert finish.error == "the stream stalled: nothing for 0.3 s"
    assert server.requests == 1, "text was streamed already: no retry within the request"


async def test_a_stream_that_never_finishes_is_cut_at_the_total_bound() -> None:
    async with stalling_server() as (url, server):
        server.scripts.append(Script(chunks=ANSWER[:1], then="trickle"))
        events = await events_of(provider(url, stall_s=5, total_s=0.5))
    finish = events[-1]
    assert isinstance(finish, Finish)
    assert (finish.stop_reason, finish.retriable) == ("error", True)
    assert finish.error == "no complete answer within 0.5 s"
    assert server.requests == 1


async def test_a_stalled_attempt_fails_and_the_worker_runs_the_next_one(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with stalling_server() as (url, server):
        server.scripts.append(Script(chunks=ANSWER[:1], then="keepalive"))
        async with worker_task(database_dsn, provider=provider(url)):
            await say(ledger, "hi")
            await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    assert outcome(events) == [
        ("user.message", None),
        ("assistant.message", "error"),
        ("run.finished", "failed"),
        ("assistant.message", "end_turn"),
        ("run.finished", "done"),
    ]
    assert events[1].payload["errorMessage"] == "the stream stalled: nothing for 0.3 s"
    assert events[3].payload["content"] == [{"type": "text", "text": "all good"}]
