"""What one request may cost the api process: the size of its body and the time it takes to
arrive (the headers' deadline and the connection limit are kept by the server's protocol,
keel_stream.api.connections).

A body is read in full, within its size limit and its deadline, before the app sees it: a body
declared larger than the limit (Content-Length) is refused at once, unread; a body without a
length (chunked) is cut as soon as it passes the limit (413 payload_too_large); a body that
stops arriving is cut at the deadline (408 request_timeout, and the connection is closed).
Either way nothing of the request is parsed and nothing of it stays in memory.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from keel_stream.api.errors import error_response
from keel_stream.errors import KeelError, PayloadTooLarge, RequestTimeout
from keel_stream.settings import KeelSettings

__all__ = ["OFF_LOOP_BYTES", "ApiLimits", "BodyLimit"]

OFF_LOOP_BYTES: Final = 64 * 1024
"""A body larger than this is parsed and validated in a thread, off the event loop."""


@dataclass(frozen=True, slots=True)
class ApiLimits:
    """The bounds of the api process (KEEL_API_MAX_BODY_BYTES, ... in the settings table)."""

    max_body_bytes: int = 1_048_576
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_connections: int = 1000
    backlog: int = 2048

    @classmethod
    def from_settings(cls, settings: KeelSettings) -> ApiLimits:
        return cls(
            max_body_bytes=settings.api_max_body_bytes,
            header_timeout_s=settings.api_header_timeout_s,
            body_timeout_s=settings.api_body_timeout_s,
            max_connections=settings.api_max_connections,
            backlog=settings.api_backlog,
        )


class _Disconnected(Exception):
    """The client went away before its body was complete."""


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            # h11 has refused a Content-Length that is not a number already.
            return int(value)
    return None


class BodyLimit:
    """ASGI middleware: the body of every HTTP request, read in full within its bounds, then
    handed to the app (which reads it as usual; later reads see the client's disconnect)."""

    def __init__(self, app: ASGIApp, limits: ApiLimits) -> None:
        self._app = app
        self._limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        try:
            body = await self._read(scope, receive)
        except _Disconnected:
            return
        except KeelError as refused:
            # A 413 keeps the connection: the server drops the rest of the body for a while
            # (keel_stream.api.connections), so that a client still sending reads the answer.
            close = not isinstance(refused, PayloadTooLarge)
            await error_response(refused, close=close)(scope, receive, send)
            return
        await self._app(scope, _replaying(body, receive), send)

    async def _read(self, scope: Scope, receive: Receive) -> bytes:
        limit = self._limits.max_body_bytes
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            raise PayloadTooLarge(f"the body has {declared} bytes; the limit is {limit}")
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self._limits.body_timeout_s):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        raise _Disconnected
                    chunk: bytes = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise PayloadTooLarge(f"the body is over the limit of {limit} bytes")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            raise RequestTimeout(
                f"the body did not arrive within {self._limits.body_timeout_s:g} s"
            ) from None


def _replaying(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the body read already, then whatever the client does next."""
    pending = True

    async def replay() -> Message:
        nonlocal pending
        if pending:
            pending = False
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
