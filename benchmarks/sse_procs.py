"""The processes of benchmarks.sse other than the api: SSE clients, the bare broadcast server,
and the summary of a py-spy profile.

    python -m benchmarks.sse_procs clients SPEC_JSON    # open the streams, print latencies (ms)
    python -m benchmarks.sse_procs broadcast PORT,FEED  # the baseline server
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

HOST = "127.0.0.1"


class SseReader(asyncio.Protocol):
    """One stream: HTTP/1.1 chunks decoded into SSE frames, each frame's latency noted (ms)."""

    def __init__(self, request: bytes, spec: dict[str, Any], sink: list[float]) -> None:
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = loop.create_future()
        self.done: asyncio.Future[None] = loop.create_future()
        self._request, self._sink = request, sink
        self._skip, self._expected = spec["warmup"], spec["warmup"] + spec["expected"]
        self._raw, self._text = bytearray(), bytearray()
        self._chunk, self._got = -1, 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).write(self._request)

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.ready, self.done):
            if not future.done():
                future.set_exception(ConnectionError(f"stream closed after {self._got} frames"))

    def data_received(self, data: bytes) -> None:
        now = time.time()
        self._raw += data
        if not self.ready.done():
            end = self._raw.find(b"\r\n\r\n")
            if end < 0:
                return
            if b" 200 " not in self._raw[: self._raw.find(b"\r\n")]:
                self.ready.set_exception(RuntimeError(bytes(self._raw[:end]).decode()))
                return
            del self._raw[: end + 4]
            self.ready.set_result(None)
        while self._next_chunk():
            pass
        while (end := self._text.find(b"\r\n\r\n")) >= 0:
            frame = bytes(self._text[:end])
            del self._text[: end + 4]
            for line in frame.split(b"\r\n"):
                if line.startswith(b"data: "):
                    stamp = datetime.fromisoformat(orjson.loads(line[6:])["committedAt"])
                    self._got += 1
                    if self._got > self._skip:
                        self._sink.append((now - stamp.timestamp()) * 1000)
        if self._got >= self._expected and not self.done.done():
            self.done.set_result(None)

    def _next_chunk(self) -> bool:
        if self._chunk < 0:
            eol = self._raw.find(b"\r\n")
            if eol < 0:
                return False
            self._chunk = int(self._raw[:eol], 16)
            del self._raw[: eol + 2]
        if len(self._raw) < self._chunk + 2:
            return False
        self._text += self._raw[: self._chunk]
        del self._raw[: self._chunk + 2]
        self._chunk = -1
        return True


async def clients(spec: dict[str, Any]) -> None:
    """Open every stream, say `ready`, wait for every frame on each, print the latencies, and
    keep the streams open until stdin closes."""
    loop = asyncio.get_running_loop()
    sink: list[float] = []
    auth = f"Authorization: Bearer {spec['key']}\r\n" if spec["key"] else ""
    readers = []
    for path in spec["paths"]:
        head = f"GET {path} HTTP/1.1\r\nHost: {HOST}\r\nAccept: text/event-stream\r\n{auth}\r\n"
        reader = SseReader(head.encode(), spec, sink)
        await loop.create_connection(functools.partial(lambda r: r, reader), HOST, spec["port"])
        readers.append(reader)
    await asyncio.wait_for(asyncio.gather(*(r.ready for r in readers)), 60)
    print("ready", flush=True)
    await asyncio.wait_for(asyncio.gather(*(r.done for r in readers)), spec["timeout"])
    print(orjson.dumps([round(ms, 2) for ms in sink]).decode(), flush=True)
    await loop.run_in_executor(None, sys.stdin.read)


def broadcast_app(feed_port: int) -> Starlette:
    """The bare broadcast: per-connection queues; each event line from the feed connection
    (the committing process) encoded once and put on every queue of its session."""
    queues: dict[str, list[asyncio.Queue[bytes]]] = {}

    async def stream(request: Request) -> StreamingResponse:
        sid = request.path_params["sid"]
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        queues.setdefault(sid, []).append(queue)

        async def body() -> AsyncIterator[bytes]:
            try:
                while True:
                    yield await queue.get()
            finally:
                queues[sid].remove(queue)

        return StreamingResponse(body(), media_type="text/event-stream")

    async def count(_: Request) -> PlainTextResponse:
        return PlainTextResponse(f"streams {sum(len(q) for q in queues.values())}\n")

    async def feed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async for line in reader:
            event = orjson.loads(line)
            frame = b"id: %d\r\nevent: %s\r\ndata: %s\r\n\r\n" % (
                event["seq"],
                event["kind"].encode(),
                line.rstrip(b"\n"),
            )
            for queue in queues.get(event["session"], ()):
                queue.put_nowait(frame)
        writer.close()

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        async with await asyncio.start_server(feed, HOST, feed_port):
            yield

    routes = [Route("/s/{sid}", stream), Route("/count", count)]
    return Starlette(routes=routes, lifespan=lifespan)


def top_frames(raw: Path, count: int = 25) -> str:
    """A py-spy raw profile (collapsed stacks) as its top frames by own and by total samples."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, weight = line.rpartition(" ")
        frames = stack.split(";")
        samples += int(weight)
        own[frames[-1]] += int(weight)
        for frame in set(frames):
            total[frame] += int(weight)
    lines = [f"{samples} samples (the api process while the rounds ran, idle excluded)", "own:"]
    lines += [f"  {100 * n / samples:5.1f}%  {frame}" for frame, n in own.most_common(count)]
    lines.append("total:")
    lines += [f"  {100 * n / samples:5.1f}%  {frame}" for frame, n in total.most_common(count)]
    return "\n".join(lines) + "\n"


def main() -> None:
    role, argument = sys.argv[1], sys.argv[2]
    if role == "clients":
        asyncio.run(clients(orjson.loads(argument)))
    else:
        http_port, feed_port = (int(port) for port in argument.split(","))
        uvicorn.run(broadcast_app(feed_port), host=HOST, port=http_port, log_level="error")


if __name__ == "__main__":
    main()
