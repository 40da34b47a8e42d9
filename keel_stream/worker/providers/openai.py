"""An OpenAI-compatible chat-completions provider over httpx, streaming (SSE).

A request that fails before any text reached the caller is retried (HTTP 408/409/429/5xx,
transport errors, a stream cut before its `[DONE]`) with backoff; once text was streamed a
failure ends the answer. Other 4xx are deterministic: no retry, `Finish.retriable` false.
Giving up on a
failure that asked to wait (Retry-After) reports the wait (`Finish.retry_after_s`): the run's
next attempt is not claimed before it has passed.

A stream that sends no event for the stall bound is cut (a retriable failure, like a cut
stream); a request, its retries included, ends after the total bound (keel_stream.worker.limits).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, aclosing
from typing import Any, Final

import httpx
from httpx_sse import aconnect_sse

from keel_stream.retry import RetryPolicy
from keel_stream.worker.limits import StreamLimits
from keel_stream.worker.providers.base import (
    Finish,
    ProviderEvent,
    ProviderFailed,
    ProviderRequest,
    TextDelta,
)
from keel_stream.worker.providers.bounds import Deadline, Stalled, StreamTimeout
from keel_stream.worker.providers.chat_wire import (
    ChatStream,
    WireError,
    chat_body,
    completion_text,
    to_chat_messages,
)
from keel_stream.worker.providers.retry import (
    PROVIDER_RETRY,
    Failure,
    final_error,
    http_failure,
    retry_pause,
    send_failure,
)

__all__ = ["OpenAIProvider", "to_chat_messages"]

_CONNECT_S: Final = 60.0
_SUMMARY_INSTRUCTION: Final = (
    "Summarize the conversation above for your own later use: the user's goals, the facts, "
    "decisions and tool results that still matter, and what is left to do. Be concise."
)


class OpenAIProvider:
    """Configured by KEEL_OPENAI_BASE_URL, KEEL_OPENAI_API_KEY and KEEL_OPENAI_MODEL."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        model: str,
        timeout_s: float | None = None,
        retry: RetryPolicy | None = None,
        limits: StreamLimits | None = None,
    ) -> None:
        self.model = model
        self._url = f"{base_url.rstrip('/')}/chat/completions"
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._retry = retry or PROVIDER_RETRY
        self._limits = limits or StreamLimits()
        # httpx's own timeouts: connect, write, and each read (a silence even between bytes).
        self._timeout = httpx.Timeout(
            timeout_s or _CONNECT_S, read=timeout_s or self._limits.stall_s
        )

    def with_model(self, model: str) -> OpenAIProvider:
        """The same endpoint, credentials and retry policy, another model."""
        other = copy.copy(self)
        other.model = model
        return other

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(timeout=self._timeout, headers=self._headers)

    async def stream(self, request: ProviderRequest) -> AsyncIterator[ProviderEvent]:
        body = chat_body(self.model, request)
        deadline = Deadline(self._limits)
        attempt = 0
        async with self._client() as client:
            while True:
                attempt += 1
                failure: Failure | None = None
                streamed = False
                async with aclosing(self._stream_once(client, body, deadline)) as items:
                    async for item in items:
                        if isinstance(item, Failure):
                            failure = item
                        else:
                            streamed = streamed or isinstance(item, TextDelta)
                            yield item
                if failure is None:
                    return
                if streamed:
                    # The caller already has part of an answer: a retry would repeat it.
                    failure = dataclasses.replace(failure, retriable=False)
                if not await retry_pause(self._retry, failure, attempt, deadline.remaining()):
                    error = final_error(self._retry, failure, attempt)
                    yield Finish(
                        "error",
                        error=error,
                        retriable=failure.run_retriable,
                        retry_after_s=failure.retry_after_s,
                    )
                    return

    async def _stream_once(
        self, client: httpx.AsyncClient, body: Mapping[str, Any], deadline: Deadline
    ) -> AsyncGenerator[ProviderEvent | Failure, None]:
        """One request: its events, and a Failure last if it failed. Every wait (the response,
        each event) is bounded by the deadline."""
        chat = ChatStream()
        try:
            async with AsyncExitStack() as stack:
                connect = aconnect_sse(client, "POST", self._url, json=body)
                source = await deadline.wait(stack.enter_async_context(connect))
                if not source.response.is_success:
                    yield await deadline.wait(http_failure(source.response))
                    return
                events = await stack.enter_async_context(aclosing(source.aiter_sse()))
                while not chat.done:
                    try:
                        sse = await deadline.wait(anext(events))
                    except StopAsyncIteration:
                        break
                    for text in chat.feed(sse.data):
                        yield TextDelta(text)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            if not chat.complete:  # a connection lost after [DONE] lost nothing
                yield send_failure(exc)
                return
        except StreamTimeout as exc:
            if not chat.complete:  # a stall after [DONE] lost nothing either
                yield Failure(str(exc), retriable=isinstance(exc, Stalled))
                return
        except WireError as exc:
            yield Failure(str(exc))
            return
        if not chat.complete:
            yield Failure(chat.incomplete_error(), retriable=True)
            return
        for call in chat.tool_calls():
            yield call
        yield chat.finish()

    async def summarize(self, messages: Sequence[Mapping[str, Any]]) -> str:
        body = {
            "model": self.model,
            "messages": [
                *to_chat_messages(messages),
                {"role": "user", "content": _SUMMARY_INSTRUCTION},
            ],
            "stream": False,
        }
        deadline = Deadline(self._limits)
        attempt = 0
        async with self._client() as client:
            while True:
                attempt += 1
                result = await self._complete_once(client, body, deadline)
                if isinstance(result, str):
                    return result
                if not await retry_pause(self._retry, result, attempt, deadline.remaining()):
                    error = final_error(self._retry, result, attempt)
                    raise ProviderFailed(f"summarize: {error}", retriable=result.run_retriable)

    async def _complete_once(
        self, client: httpx.AsyncClient, body: Mapping[str, Any], deadline: Deadline
    ) -> str | Failure:
        """One non-streamed request: the answer text, or why there is none. Not streamed, it
        has only the total bound (httpx's read timeout bounds each silence)."""
        try:
            response = await deadline.wait(client.post(self._url, json=body), stall=False)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            return send_failure(exc)
        except StreamTimeout as exc:
            return Failure(str(exc))
        if not response.is_success:
            return await http_failure(response)
        try:
            return completion_text(response.json())
        except ValueError as exc:  # WireError, or a body that is not JSON
            return Failure(f"{exc.__class__.__name__}: {exc}")
