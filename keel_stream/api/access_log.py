"""Access log and request id: one structured line per request, when its response has ended.

The request id is the client's `X-Request-Id` when it is a sane token (letters, digits and
`._:+/=-`, at most 128), else a fresh one; it is echoed in the response's `X-Request-Id` and
bound into structlog's context, so every line logged while the request runs carries it. The line
has the method, the path (never the query string), the status, the duration, the request id and
the tenant once the request's API key resolved one (`note_tenant`). An SSE stream is logged once,
when it ends. Headers are never logged: no API key reaches the log.

Written here rather than taken from asgi-correlation-id: the line has to wrap the whole response
(the status and the end of a stream) in the same `send`, which leaves the id itself a regex and
three lines.
"""

from __future__ import annotations

import re
import time
import uuid
from contextvars import ContextVar
from typing import Any, Final

import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from keel_stream.logs import get_logger

__all__ = ["REQUEST_ID_HEADER", "AccessLog", "note_tenant", "request_id_of"]

REQUEST_ID_HEADER: Final = "x-request-id"
_HEADER: Final = REQUEST_ID_HEADER.encode()
_SANE: Final = re.compile(r"[A-Za-z0-9._:+/=-]{1,128}")
_request: ContextVar[dict[str, Any] | None] = ContextVar("keel_request", default=None)


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's request id when it is a sane token, else a new one."""
    for name, value in headers:
        if name.lower() == _HEADER:
            text = value.decode("latin-1")
            if _SANE.fullmatch(text):
                return text
            break
    return uuid.uuid4().hex


def note_tenant(tenant: str) -> None:
    """The request's API key belongs to `tenant`: its access line, and the lines logged while it
    runs from here on, say so."""
    request = _request.get()
    if request is not None:
        request["tenant"] = tenant
    structlog.contextvars.bind_contextvars(tenant=tenant)


class AccessLog:
    """ASGI middleware: request id in and out, one access line per HTTP request."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app
        self._log = get_logger("api.access")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        request_id = request_id_of(scope.get("headers", []))
        line: dict[str, Any] = {"status": None, "stream": False}
        began = time.monotonic()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != _HEADER]
                headers.append((_HEADER, request_id.encode()))
                message = {**message, "headers": headers}
                line["status"] = message["status"]
                line["stream"] = any(
                    k.lower() == b"content-type" and v.startswith(b"text/event-stream")
                    for k, v in headers
                )
            await send(message)

        token = _request.set(line)
        try:
            with structlog.contextvars.bound_contextvars(request_id=request_id):
                await self._app(scope, receive, send_with_id)
        except Exception:
            line["status"] = line["status"] or 500
            raise
        finally:
            _request.reset(token)
            if "tenant" in line:
                structlog.contextvars.unbind_contextvars("tenant")
            self._write(scope, request_id, line, began)

    def _write(self, scope: Scope, request_id: str, line: dict[str, Any], began: float) -> None:
        fields: dict[str, Any] = {
            "method": scope.get("method"),
            "path": scope.get("path"),
            "status": line["status"],
            "duration_ms": round((time.monotonic() - began) * 1000, 1),
            "request_id": request_id,
        }
        if line["stream"]:
            fields["stream"] = True
        if "tenant" in line:
            fields["tenant"] = line["tenant"]
        self._log.info("request", **fields)
