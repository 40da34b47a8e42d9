"""A small local server speaking the OpenAI chat-completions streaming wire format."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.wait import wait_until


def _chunk(delta: dict[str, Any], finish: str | None = None) -> str:
    body = {"id": "c1", "object": "chat.completion.chunk", "model": "local",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip
    return f"data: {json.dumps(body)}\n\n"


class ChatServer:
    """Answers: a tool call when asked to "lookup" (arguments split over two deltas), text after
    a tool result, an echo otherwise; HTTP 500 when the text says "explode"."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        messages = body["messages"]
        last = messages[-1]
        if "explode" in str(last.get("content")):
            return JSONResponse({"error": {"message": "boom"}}, status_code=500)

        async def stream() -> AsyncIterator[str]:
            if last["role"] == "tool":
                yield _chunk({"role": "assistant", "content": "the answer"})
                yield _chunk({"content": f" is {last['content']}"})
                yield _chunk({}, "stop")
            elif "lookup" in str(last.get("content")) and body.get("tools"):
                call = {"index": 0, "id": "call_1", "type": "function",
                        "function": {"name": "echo", "arguments": '{"q": '}}  # fmt: skip
                yield _chunk({"role": "assistant", "tool_calls": [call]})
                more = {"index": 0, "function": {"arguments": '"x"}'}}
                yield _chunk({"tool_calls": [more]})
                yield _chunk({}, "tool_calls")
            else:
                yield _chunk({"role": "assistant", "content": "you said: "})
                yield _chunk({"content": str(last.get("content"))})
                yield _chunk({}, "stop")
            usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
            yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")


@contextlib.asynccontextmanager
async def chat_server() -> AsyncIterator[tuple[str, ChatServer]]:
    """Serve on a free loopback port; yields the base URL (…/v1) and the server."""
    server = ChatServer()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(server.app, host="127.0.0.1", port=port, log_level="warning")
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
