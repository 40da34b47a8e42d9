"""The OpenAI-compatible provider against a local server that speaks the wire format."""

from __future__ import annotations

import asyncpg

from keel_stream.kernel import CommitRequest
from keel_stream.retry import RetryPolicy
from keel_stream.store import PostgresLedger
from keel_stream.worker.providers import (
    Finish,
    OpenAIProvider,
    ProviderRequest,
    TextDelta,
    ToolCall,
)
from keel_stream.worker.tools import TOOLS
from tests.support.chat_server import chat_server
from tests.support.workers import log_of, settled, worker_task


async def test_streams_text_and_usage() -> None:
    async with chat_server() as (url, _):
        provider = OpenAIProvider(url, "sk-test", "local")
        request = ProviderRequest("t", "s", "g1", [{"role": "user", "content": "hi"}])
        events = [e async for e in provider.stream(request)]
    assert events == [
        TextDelta("you said: "),
        TextDelta("hi"),
        Finish("end_turn", {"input": 7, "output": 3}),
    ]


async def test_server_error_is_a_terminal_error_after_retries() -> None:
    async with chat_server() as (url, server):
        retry = RetryPolicy(attempts=2, initial_s=0.01)
        provider = OpenAIProvider(url, None, "local", retry=retry)
        request = ProviderRequest("t", "s", "g1", [{"role": "user", "content": "explode"}])
        events = [e async for e in provider.stream(request)]
    (finish,) = events
    assert isinstance(finish, Finish)
    assert finish.stop_reason == "error"
    assert "HTTP 500" in (finish.error or "")
    assert finish.retriable
    assert len(server.requests) == 2


async def test_a_tool_turn_through_the_worker(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with chat_server() as (url, server):
        provider = OpenAIProvider(url, "sk-test", "local")
        async with worker_task(database_dsn, provider=provider):
            await ledger.commit(
                CommitRequest(
                    tenant_id="acme",
                    session_id="s1",
                    kind="user.message",
                    payload={"text": "please lookup x"},
                )
            )
            await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    kinds = [e.kind for e in events]
    assert kinds == [
        "user.message", "assistant.message", "tool.result", "assistant.message", "run.finished",
    ]  # fmt: skip
    call = events[1].payload["content"][0]
    assert call == {"type": "toolCall", "id": "call_1", "name": "echo", "arguments": {"q": "x"}}
    assert events[2].payload["toolCallId"] == "call_1"
    assert events[3].payload["content"] == [{"type": "text", "text": 'the answer is {"q": "x"}'}]
    assert events[4].payload["tokens"] == {"input": 14, "output": 6}
    second = server.requests[1]["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": "call_1", "content": '{"q": "x"}'}
    assert second[-2]["tool_calls"][0]["function"]["name"] == "echo"
    assert server.requests[0]["tools"][0]["type"] == "function"


async def test_tool_calls_are_assembled_from_split_deltas() -> None:
    async with chat_server() as (url, _):
        provider = OpenAIProvider(url, None, "local")
        request = ProviderRequest(
            "t", "s", "g1", [{"role": "user", "content": "lookup"}], tools=[TOOLS["echo"].spec]
        )
        events = [e async for e in provider.stream(request)]
    assert events[0] == ToolCall("call_1", "echo", {"q": "x"})
    assert isinstance(events[1], Finish)
    assert events[1].stop_reason == "tool_use"
