"""The Streamable HTTP transport: every message is POSTed as JSON to one URL.

As in MCP's Streamable HTTP transport the client accepts ``application/json, text/event-stream``:
a notification or response is acknowledged with 202 and no body; a request is answered either
with one JSON message (``application/json``) or with an SSE stream whose ``data`` fields are
JSON-RPC messages.  Server notifications travel on such a stream: an ``event.stream`` subscribe
request is answered with an SSE stream that carries the subscribe result first and then the
session's event notifications until the session closes.  No MCP session header is used.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import httpx
from httpx_sse import EventSource

from keel_stream.gateway.errors import BackendUnavailable, GatewayError, ProtocolError
from keel_stream.gateway.jsonrpc import Message, Request, decode, encode
from keel_stream.gateway.transport import MessageSink, Transport

__all__ = ["HttpTransport"]

_ACCEPT = "application/json, text/event-stream"


class HttpTransport(Transport):
    """POST JSON-RPC to ``url``; read JSON or SSE answers."""

    def __init__(
        self, url: str, headers: Mapping[str, str] | None = None, connect_timeout_s: float = 10.0
    ) -> None:
        self.url = url
        self.headers = {"Accept": _ACCEPT, "Content-Type": "application/json", **(headers or {})}
        self.connect_timeout_s = connect_timeout_s
        self._client: httpx.AsyncClient | None = None
        self._sink: MessageSink | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self, sink: MessageSink) -> None:
        self._sink = sink
        timeout = httpx.Timeout(None, connect=self.connect_timeout_s)
        self._client = httpx.AsyncClient(timeout=timeout)

    async def send(self, message: Message) -> None:
        if self._client is None or self._sink is None:
            raise GatewayError("the HTTP transport is not started")
        task = asyncio.create_task(self._post(self._client, self._sink, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _dispatch(self, sink: MessageSink, data: bytes | str) -> None:
        try:
            message = decode(data)
        except ProtocolError as exc:
            sink.on_malformed(exc)
            return
        sink.on_message(message)

    async def _post(self, client: httpx.AsyncClient, sink: MessageSink, message: Message) -> None:
        try:
            await self._exchange(client, sink, message)
        except (httpx.HTTPError, GatewayError) as exc:
            if isinstance(message, Request):
                error = exc if isinstance(exc, GatewayError) else None
                sink.on_request_failed(
                    message.id, error or BackendUnavailable(f"HTTP provider failed: {exc!r}")
                )

    async def _exchange(
        self, client: httpx.AsyncClient, sink: MessageSink, message: Message
    ) -> None:
        body = encode(message)
        async with client.stream("POST", self.url, content=body, headers=self.headers) as resp:
            content_type = resp.headers.get("content-type", "").split(";")[0].strip()
            if resp.status_code == 202 or not isinstance(message, Request):
                return
            if content_type == "text/event-stream":
                async for sse in EventSource(resp).aiter_sse():
                    if sse.data:
                        self._dispatch(sink, sse.data)
                return
            data = await resp.aread()
            if content_type == "application/json" and data:
                self._dispatch(sink, data)
                return
            raise BackendUnavailable(
                f"HTTP provider answered {resp.status_code} {content_type or 'without a body'}"
            )

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._client is not None:
            with contextlib.suppress(httpx.HTTPError):
                await self._client.aclose()
            self._client = None
        if self._sink is not None:
            self._sink.on_closed("the HTTP transport was closed")
