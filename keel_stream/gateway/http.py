"""The Streamable HTTP transport: every message is POSTed as JSON to one URL.

As in MCP's Streamable HTTP transport the client accepts ``application/json, text/event-stream``:
a notification or response is acknowledged with 202 and no body; a request is answered either
with one JSON message (``application/json``) or with an SSE stream whose ``data`` fields are
JSON-RPC messages.  Server notifications travel on such a stream: an ``event.stream`` subscribe
request is answered with an SSE stream that carries the subscribe result first and then the
session's event notifications until the session closes.  No MCP session header is used.

Every message read is bounded like a stdio line (``max_line_bytes``, KEEL_RPC_MAX_LINE_BYTES): a
JSON body, or one SSE event's data, over it fails its request and the connection is lost (the
provider failed), read no further.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping

import httpx

from keel_stream.errors import BackendUnavailable, GatewayError, ProtocolError
from keel_stream.gateway.jsonrpc import (
    DEFAULT_MAX_LINE_BYTES,
    Message,
    Request,
    decode,
    encode,
    over_the_limit,
)
from keel_stream.gateway.transport import MessageSink, Transport

__all__ = ["HttpTransport"]

_ACCEPT = "application/json, text/event-stream"


class _OverTheLimit(Exception):
    """A message over the limit: the provider failed (reported as BackendUnavailable; a marker,
    not a member of the error tree, so the tree keeps one class per code)."""


async def _body(resp: httpx.Response, limit: int) -> bytes:
    """The whole body; _OverTheLimit past ``limit`` bytes (nothing more is read)."""
    body = bytearray()
    async for chunk in resp.aiter_bytes():
        body += chunk
        if len(body) > limit:
            raise _OverTheLimit(over_the_limit(limit))
    return bytes(body)


def _data_of(line: bytes) -> bytes | None:
    """The value of an SSE ``data`` field line; None for any other line."""
    name, colon, value = line.partition(b":")
    if name != b"data":
        return None
    return value[1:] if colon and value.startswith(b" ") else value


async def _sse_data(resp: httpx.Response, limit: int) -> AsyncIterator[bytes]:
    """Each SSE event's data (its data lines joined by newlines); _OverTheLimit when a line
    or an event's data passes ``limit`` bytes."""
    pending, data = bytearray(), bytearray()
    lines = 0
    async for chunk in resp.aiter_bytes():
        pending += chunk
        while (end := pending.find(b"\n")) >= 0:
            line = bytes(pending[:end]).rstrip(b"\r")
            del pending[: end + 1]
            if not line and lines:
                yield bytes(data)
                data.clear()
                lines = 0
            elif (value := _data_of(line)) is not None:
                data += (b"\n" if lines else b"") + value
                lines += 1
            if len(data) > limit:
                raise _OverTheLimit(over_the_limit(limit))
        if len(pending) > limit:
            raise _OverTheLimit(over_the_limit(limit))


class HttpTransport(Transport):
    """POST JSON-RPC to ``url``; read JSON or SSE answers."""

    def __init__(
        self,
        url: str,
        headers: Mapping[str, str] | None = None,
        connect_timeout_s: float = 10.0,
        *,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        self.url = url
        self.max_line_bytes = max_line_bytes
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

    async def _dispatch(self, sink: MessageSink, data: bytes | str) -> None:
        try:
            message = decode(data)
        except ProtocolError as exc:
            sink.on_malformed(exc)
            return
        await sink.admit(message)  # an SSE stream not read further fills: backpressure
        sink.on_message(message)

    async def _post(self, client: httpx.AsyncClient, sink: MessageSink, message: Message) -> None:
        try:
            await self._exchange(client, sink, message)
        except _OverTheLimit as exc:
            failed = BackendUnavailable(str(exc))
            if isinstance(message, Request):
                sink.on_request_failed(message.id, failed)
            sink.on_closed(failed.message)
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
                async for data in _sse_data(resp, self.max_line_bytes):
                    if data:
                        await self._dispatch(sink, data)
                return
            data = await _body(resp, self.max_line_bytes)
            if content_type == "application/json" and data:
                await self._dispatch(sink, data)
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
