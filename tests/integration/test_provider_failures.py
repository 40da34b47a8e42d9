"""The OpenAI-compatible provider fails well: against a local server that misbehaves on cue."""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from structlog.testing import capture_logs

from keel_stream.retry import RetryPolicy
from keel_stream.worker.providers import (
    FakeProvider,
    Finish,
    OpenAIProvider,
    ProviderEvent,
    ProviderFailed,
    ProviderRequest,
    TextDelta,
    ToolCall,
)
from keel_stream.worker.providers.chat_wire import to_chat_messages
from keel_stream.worker.providers.retry import retry_after_s
from keel_stream.worker.tools import TOOLS
from tests.support.chat_server import Fault, chat_server

FAST = RetryPolicy(attempts=3, initial_s=0.01, maximum_s=0.05, max_retry_after_s=5)
ANSWER = [TextDelta("you said: "), TextDelta("hi"), Finish("end_turn", {"input": 7, "output": 3})]
CONTEXT: list[dict[str, Any]] = [
    {"role": "user", "content": "please lookup x"},
    {"role": "assistant", "content": [{"type": "text", "text": "x is 42"}]},
]


def _provider(url: str, retry: RetryPolicy = FAST, timeout_s: float = 10) -> OpenAIProvider:
    return OpenAIProvider(url, "sk-test", "local", timeout_s=timeout_s, retry=retry)


async def _events(provider: OpenAIProvider, text: str = "hi") -> list[ProviderEvent]:
    request = ProviderRequest(
        "t", "s", "g1", [{"role": "user", "content": text}], tools=[TOOLS["echo"].spec]
    )
    return [e async for e in provider.stream(request)]


def _failed(events: Sequence[ProviderEvent]) -> Finish:
    finish = events[-1]
    assert isinstance(finish, Finish)
    assert finish.stop_reason == "error"
    assert finish.error
    return finish


def _gap(arrivals: Sequence[float]) -> float:
    return arrivals[1] - arrivals[0]


async def test_stream_cut_without_finish_reason_is_a_failed_request() -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(cut_after_chunks=1))
        events = await _events(_provider(url))
    assert events[0] == TextDelta("you said: ")
    assert "without a finish_reason" in (_failed(events).error or "")
    assert len(events) == 2
    assert len(server.requests) == 1, "text was streamed already: no retry"


async def test_connection_dropped_mid_stream_is_a_failed_request() -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(cut_after_chunks=1, drop=True))
        events = await _events(_provider(url))
    assert events[0] == TextDelta("you said: ")
    assert "RemoteProtocolError" in (_failed(events).error or "")
    assert len(server.requests) == 1, "text was streamed already: no retry"


async def test_done_without_finish_reason_is_a_failed_request() -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(no_finish_reason=True))
        events = await _events(_provider(url))
    assert events[:2] == ANSWER[:2]
    assert "[DONE] without a finish_reason" in (_failed(events).error or "")


async def test_a_stream_cut_after_its_finish_reason_is_a_failed_request() -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(cut_after_chunks=3))
        events = await _events(_provider(url))
    assert events[:2] == ANSWER[:2]
    assert "before [DONE]" in (_failed(events).error or ""), "the usage after it was lost"
    assert len(server.requests) == 1, "text was streamed already: no retry"


@pytest.mark.parametrize(("chunks", "drop"), [(2, False), (3, True)])
async def test_a_tool_call_stream_cut_before_done_is_retried(chunks: int, drop: bool) -> None:
    async with chat_server() as (url, server):
        # The call, its finish_reason (and the usage): then the end, or a dropped connection.
        server.faults.append(Fault(tool_arguments='{"q": "x"}', cut_after_chunks=chunks, drop=drop))
        events = await _events(_provider(url))
    assert events == ANSWER, "no text had reached the run: the request is tried again"
    assert len(server.requests) == 2


async def test_stream_cut_before_any_text_is_retried() -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(cut_after_chunks=0))
        events = await _events(_provider(url))
    assert events == ANSWER
    assert len(server.requests) == 2


async def test_retry_after_is_honoured() -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(status=429, headers={"Retry-After": "1"}))
        events = await _events(_provider(url))
    assert events == ANSWER
    assert _gap(server.arrivals) >= 1.0


async def test_retry_after_ms_is_honoured() -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(status=503, headers={"retry-after-ms": "400"}))
        events = await _events(_provider(url))
    assert events == ANSWER
    assert _gap(server.arrivals) >= 0.4


def test_retry_after_as_an_http_date_is_understood() -> None:
    now = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    later = httpx.Headers({"Retry-After": format_datetime(now + timedelta(seconds=7), True)})
    assert retry_after_s(later, now) == 7.0
    past = httpx.Headers({"Retry-After": format_datetime(now - timedelta(seconds=7), True)})
    assert retry_after_s(past, now) == 0.0
    assert retry_after_s(httpx.Headers({"Retry-After": "soon"}), now) is None
    assert retry_after_s(httpx.Headers({"retry-after-ms": "250", "Retry-After": "9"})) == 0.25


async def test_retry_after_beyond_the_limit_fails_at_once() -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(status=429, headers={"Retry-After": "120"}))
        began = time.monotonic()
        events = await _events(_provider(url))
    assert time.monotonic() - began < 5
    finish = _failed(events)
    assert finish.error is not None
    assert finish.error.startswith("HTTP 429: ")
    assert "120s" in finish.error
    assert finish.retriable
    assert len(server.requests) == 1


async def test_429_and_5xx_are_retried_with_backoff() -> None:
    retry = RetryPolicy(attempts=6, initial_s=0.01, maximum_s=0.05)
    async with chat_server() as (url, server):
        server.faults.extend(Fault(status=s) for s in (429, 500, 502, 503, 504))
        events = await _events(_provider(url, retry))
    assert events == ANSWER
    assert len(server.requests) == 6


def test_backoff_is_exponential_with_jitter_and_capped() -> None:
    policy = RetryPolicy(attempts=7, initial_s=0.5, maximum_s=4)
    assert [policy.backoff_s(n, rng=lambda: 1.0) for n in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]
    assert policy.backoff_s(3, rng=lambda: 0.0) == pytest.approx(1.6)  # a fifth off at most
    assert policy.backoff_s(3, rng=lambda: 0.5) == pytest.approx(1.8)


async def test_retries_give_up_after_max_attempts() -> None:
    async with chat_server() as (url, server):
        server.faults.extend(Fault(status=503) for _ in range(3))
        events = await _events(_provider(url))
    finish = _failed(events)
    assert finish.error is not None
    assert finish.error.startswith("HTTP 503: ")
    assert "gave up after 3 attempts" in finish.error
    assert finish.retriable
    assert len(server.requests) == 3


async def test_transport_error_is_retried() -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(disconnect=True))
        events = await _events(_provider(url))
    assert events == ANSWER
    assert len(server.requests) == 2


async def test_read_timeout_is_retried() -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(stall_s=1.0))
        events = await _events(_provider(url, timeout_s=0.4))
    assert events == ANSWER
    assert len(server.requests) == 2
    assert _gap(server.arrivals) >= 0.4, "the first request timed out"


async def test_connect_error_is_retried_then_fails() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with capture_logs() as logs:
        events = await _events(_provider(f"http://127.0.0.1:{port}/v1"))
    finish = _failed(events)
    assert "ConnectError" in (finish.error or "")
    assert finish.retriable
    assert [e["attempt"] for e in logs] == [1, 2, 3]


async def test_authentication_error_is_permanent_without_retry() -> None:
    body = '{"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}'
    async with chat_server() as (url, server):
        server.faults.append(Fault(status=401, body=body))
        events = await _events(_provider(url))
    assert events == [Finish("error", error=f"HTTP 401: {body}", retriable=False)]
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [400, 403, 404, 422])
async def test_client_errors_are_permanent(status: int) -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(status=status, body="x" * 10_000))
        events = await _events(_provider(url))
    finish = _failed(events)
    assert not finish.retriable
    assert finish.error == f"HTTP {status}: " + "x" * 2048
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [408, 409])
async def test_timeout_and_conflict_statuses_are_retried(status: int) -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(status=status))
        events = await _events(_provider(url))
    assert events == ANSWER
    assert len(server.requests) == 2


@pytest.mark.parametrize("raw", ['{"q": ', "[1, 2]", "not json at all"])
async def test_malformed_tool_arguments_become_invalid_arguments(raw: str) -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(tool_arguments=raw))
        events = await _events(_provider(url))
    assert events == [
        ToolCall("call_bad", "echo", {}, invalid_arguments=raw),
        Finish("tool_use", {"input": 7, "output": 3}),
    ]
    assert len(server.requests) == 1


def test_invalid_arguments_go_back_to_the_model_as_it_sent_them() -> None:
    call = {"type": "toolCall", "id": "c1", "name": "echo", "arguments": {}}
    assistant = {"role": "assistant", "content": [{**call, "invalidArguments": '{"q": '}]}
    (message,) = to_chat_messages([assistant])
    assert message["tool_calls"][0]["function"]["arguments"] == '{"q": '
    (valid,) = to_chat_messages([{"role": "assistant", "content": [call]}])
    assert valid["tool_calls"][0]["function"]["arguments"] == "{}"


async def test_each_failure_is_logged_once_with_its_cause() -> None:
    async with chat_server() as (url, server):
        server.faults.extend([Fault(status=503), Fault(status=401, body="denied")])
        with capture_logs() as logs:
            events = await _events(_provider(url))
    assert not _failed(events).retriable
    assert [(e["event"], e["status"], e["attempt"]) for e in logs] == [
        ("provider request failed, will retry", 503, 1),
        ("provider request failed", 401, 2),
    ]
    assert logs[1]["error"] == "HTTP 401: denied"
    assert logs[1]["retriable"] is False


async def test_summarize_asks_for_a_non_streamed_summary() -> None:
    async with chat_server() as (url, server):
        summary = await _provider(url).summarize(CONTEXT)
    assert summary == "a summary of 3 messages"
    (body,) = server.requests
    assert body["stream"] is False
    assert body["messages"][:-1] == to_chat_messages(CONTEXT)
    assert body["messages"][-1]["role"] == "user"
    assert "summar" in body["messages"][-1]["content"].lower()


async def test_summarize_retries_transient_failures() -> None:
    async with chat_server() as (url, server):
        server.faults.extend(
            [Fault(status=429, headers={"retry-after-ms": "200"}), Fault(disconnect=True)]
        )
        summary = await _provider(url).summarize(CONTEXT)
    assert summary == "a summary of 3 messages"
    assert len(server.requests) == 3
    assert _gap(server.arrivals) >= 0.2


async def test_summarize_failure_raises_provider_failed() -> None:
    async with chat_server() as (url, server):
        server.faults.extend(Fault(status=503) for _ in range(3))
        with pytest.raises(ProviderFailed, match="gave up after 3 attempts") as transient:
            await _provider(url).summarize(CONTEXT)
        server.faults.append(Fault(status=401, body="denied"))
        with pytest.raises(ProviderFailed, match="HTTP 401: denied") as permanent:
            await _provider(url).summarize(CONTEXT)
    assert transient.value.retriable
    assert not permanent.value.retriable
    assert len(server.requests) == 4


async def test_summarize_of_the_fake_provider_is_deterministic_and_bounded() -> None:
    provider = FakeProvider()
    summary = await provider.summarize(CONTEXT)
    assert summary == "summary of 2 messages: please lookup x | x is 42"
    assert summary == await provider.summarize(CONTEXT)
    many = [{"role": "user", "content": "y" * 100}] * 500
    long = await provider.summarize(many)
    assert len(long) <= 2000
    assert long.startswith("summary of 500 messages: " + "y" * 40 + " | ")
