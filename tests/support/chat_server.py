"""A small local server speaking the OpenAI chat-completions wire format, with scripted faults."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from collections import deque
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from tests.support.wait import wait_until

_TRANSPORT = "chat_server.transport"
_USAGE = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {"id": "c1", "object": "chat.completion.chunk", "model": "local",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return f"data: {json.dumps(body)}\n\n"


@dataclass(frozen=True)
class Fault:
    """A misbehaviour for one request; ChatServer.faults are used first in, first out."""

    status: int | None = None
    """Answer with this HTTP status, `headers` and `body` instead of a completion."""
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str = '{"error": {"message": "injected fault", "type": "server_error"}}'
    disconnect: bool = False
    """Close the connection without sending any response."""
    stall_s: float = 0.0
    """Wait this long before answering (longer than the client's timeout: a read timeout)."""
    cut_after_chunks: int | None = None
    """Stream this many chunks of the answer, then end the body: no finish_reason, no [DONE]."""
    drop: bool = False
    """With cut_after_chunks: drop the connection there instead of ending the body."""
    no_finish_reason: bool = False
    """Leave the finish_reason chunk out (the stream still ends with usage and [DONE])."""
    tool_arguments: str | None = None
    """Answer with a call to `tool_name` whose arguments are this raw text."""
    tool_name: str = "echo"
    """The tool a `tool_arguments` answer calls (a scripted call to any tool offered)."""
    tool_call_id: str = "call_bad"


def _drop_connection(request: Request) -> None:
    transport = request.scope.get(_TRANSPORT)
    if not isinstance(transport, asyncio.BaseTransport):
        raise RuntimeError("no transport to drop: the app is not served through ChatServer.asgi")
    transport.close()


class ChatServer:
    """Answers: a tool call when asked to "lookup" (arguments split over two deltas; a 1.5 s
    `sleep` for "slow-lookup"), text after
    a tool result, an echo otherwise; HTTP 500 when the text says "explode"; `a summary of N
    messages` to a request that is not streamed. `faults` script misbehaviours; `requests` and
    `arrivals` (time.monotonic()) record every request."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.arrivals: list[float] = []
        self.faults: deque[Fault] = deque()
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def asgi(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The app as served: notes the connection so that a fault can drop it."""
        # uvicorn's `send` is a bound method of its request cycle, which holds the transport.
        scope[_TRANSPORT] = getattr(getattr(send, "__self__", None), "transport", None)
        await self.app(scope, receive, send)

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.arrivals.append(time.monotonic())
        fault = self.faults.popleft() if self.faults else Fault()
        if fault.stall_s:
            await asyncio.sleep(fault.stall_s)
        if fault.disconnect:
            _drop_connection(request)
            return Response()
        if fault.status is not None:
            return Response(fault.body, fault.status, dict(fault.headers), "application/json")
        last = body["messages"][-1]
        if "explode" in str(last.get("content")):
            return JSONResponse({"error": {"message": "boom"}}, status_code=500)
        if not body.get("stream"):
            return JSONResponse(self._completion(body))
        chunks = self._chunks(body, fault)
        if fault.cut_after_chunks is not None:
            chunks = chunks[: fault.cut_after_chunks]

        async def stream() -> AsyncIterator[str]:
            for chunk in chunks:
                yield chunk
            if fault.drop:
                _drop_connection(request)

        return StreamingResponse(stream(), media_type="text/event-stream")

    def _chunks(self, body: dict[str, Any], fault: Fault) -> list[str]:
        """The whole answer as SSE events: deltas, the finish_reason, usage, [DONE]."""
        last = body["messages"][-1]
        if fault.tool_arguments is not None:
            call = {"index": 0, "id": fault.tool_call_id, "type": "function",
                    "function": {"name": fault.tool_name,
                                 "arguments": fault.tool_arguments}}  # fmt: skip
            deltas, finish = [_chunk({"role": "assistant", "tool_calls": [call]})], "tool_calls"
        elif last["role"] == "tool":
            deltas = [
                _chunk({"role": "assistant", "content": "the answer"}),
                _chunk({"content": f" is {last['content']}"}),
            ]
            finish = "stop"
        elif "slow-lookup" in str(last.get("content")) and body.get("tools"):
            # A tool that takes a while (so that input can arrive while it runs).
            call = {"index": 0, "id": f"call_slow_{len(self.requests)}", "type": "function",
                    "function": {"name": "sleep", "arguments": '{"seconds": 1.5}'}}  # fmt: skip
            deltas, finish = [_chunk({"role": "assistant", "tool_calls": [call]})], "tool_calls"
        elif "lookup" in str(last.get("content")) and body.get("tools"):
            call = {"index": 0, "id": "call_1", "type": "function",
                    "function": {"name": "echo", "arguments": '{"q": '}}  # fmt: skip
            more = {"index": 0, "function": {"arguments": '"x"}'}}
            deltas = [
                _chunk({"role": "assistant", "tool_calls": [call]}),
                _chunk({"tool_calls": [more]}),
            ]
            finish = "tool_calls"
        else:
            deltas = [
                _chunk({"role": "assistant", "content": "you said: "}),
                _chunk({"content": str(last.get("content"))}),
            ]
            finish = "stop"
        ending = [] if fault.no_finish_reason else [_chunk({}, finish)]
        usage = f"data: {json.dumps({'choices': [], 'usage': _USAGE})}\n\n"
        return [*deltas, *ending, usage, "data: [DONE]\n\n"]

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        text = f"a summary of {len(body['messages'])} messages"
        return {"id": "c1", "object": "chat.completion", "model": "local", "usage": _USAGE,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}]}  # fmt: skip


@contextlib.asynccontextmanager
async def chat_server() -> AsyncIterator[tuple[str, ChatServer]]:
    """Serve on a free loopback port; yields the base URL (…/v1) and the server."""
    server = ChatServer()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(
        server.asgi, host="127.0.0.1", port=port, log_level="warning", interface="asgi3"
    )
    http = uvicorn.Server(config)
    task = asyncio.create_task(http.serve())

    async def started() -> bool:
        return bool(http.started)

    await wait_until(started, 10, "the chat server to start")
    try:
        yield f"http://127.0.0.1:{port}/v1", server
    finally:
        http.should_exit = True
        await task
