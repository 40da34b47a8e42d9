"""The server's HTTP/1.1 protocol (uvicorn's h11 one) with the bounds h11 does not keep itself.

- A request's headers must arrive within `header_timeout_s` of the connection's opening (or
  of the previous response, on a kept-alive connection). uvicorn's keep-alive timer restarts
  on every byte, so a client sending its headers a byte at a time would hold the connection
  forever; this deadline does not move. At the deadline: 408 and the connection is closed.
- The rest of a body answered before it was read (413) is read and dropped, never buffered,
  for at most `body_timeout_s`, then the connection is closed. Closing at once would reset a
  client still sending, which then never reads the 413.
- At most `max_connections` connections (or requests in flight) are served at once; a request
  over it gets 503 `server_busy` and its connection is closed. uvicorn's own limit_concurrency
  does the same with a plain-text body; this one answers with the API's error body.

A body's own deadline and size are kept by the app (keel_stream.api.limits.BodyLimit).
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Final

import h11
from starlette.types import Receive, Scope, Send
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.server import ServerState

from keel_stream.api.errors import error_json, error_response
from keel_stream.api.limits import ApiLimits
from keel_stream.errors import RequestTimeout, ServerBusy

__all__ = ["BoundedH11Protocol", "bounded_protocol"]

_TIMEOUT: Final = RequestTimeout("the request's headers did not arrive in time")
_HEADERS: Final = "headers"
_DRAIN: Final = "drain"


def _header_timeout_response() -> bytes:
    body = error_json(_TIMEOUT)
    head = (
        "HTTP/1.1 408 Request Timeout\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class BoundedH11Protocol(H11Protocol):
    """uvicorn's H11Protocol with the deadlines and the connection limit of the module."""

    limits: ClassVar[ApiLimits] = ApiLimits()

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._timer: asyncio.TimerHandle | None = None
        self._phase: str | None = None
        self._served = self.app
        self.app = self._gate

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_timer()
        super().connection_lost(exc)

    def _phase_now(self) -> str | None:
        if self.transport.is_closing():
            return None
        if self.conn.their_state is h11.IDLE:
            return _HEADERS
        answered = self.conn.our_state in (h11.DONE, h11.MUST_CLOSE)
        if self.conn.their_state is h11.SEND_BODY and answered:
            return _DRAIN
        return None  # a request in progress: the app keeps its body's deadline

    def _watch(self) -> None:
        """Arm the deadline of the phase the connection is in, once when the phase begins (so
        that bytes arriving meanwhile never move it)."""
        phase = self._phase_now()
        if phase == self._phase:
            return
        self._stop_timer()
        self._phase = phase
        if phase is not None:
            delay = (
                self.limits.header_timeout_s if phase == _HEADERS else self.limits.body_timeout_s
            )
            self._timer = self.loop.call_later(delay, self._expired)

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        if self.transport.is_closing():
            return
        if self._phase == _HEADERS:
            # No request was parsed, so h11 cannot frame an answer: the bytes are written as is.
            self.transport.write(_header_timeout_response())
        self.transport.close()

    async def _gate(self, scope: Scope, receive: Receive, send: Send) -> None:
        # This connection and this request's task are counted already.
        limit = self.limits.max_connections
        if len(self.connections) > limit or len(self.tasks) > limit:
            busy = ServerBusy(f"the server serves {limit} connections at most; retry shortly")
            await error_response(busy, close=True)(scope, receive, send)
            return
        await self._served(scope, receive, send)


def bounded_protocol(limits: ApiLimits) -> type[BoundedH11Protocol]:
    """The protocol class of one server, with that server's limits."""
    return type("BoundedH11", (BoundedH11Protocol,), {"limits": limits})
