"""The reference sidecar: a real program that speaks the gateway protocol.

    python -m keel_stream.gateway.sidecar_ref --kind agent [switches]     # stdio
    python -m keel_stream.gateway.sidecar_ref --kind tool --http 0        # Streamable HTTP

On stdio it reads one JSON-RPC message per line from stdin and writes one per line to stdout; at
stdin EOF it exits by itself.  With ``--http PORT`` it serves POST ``/rpc`` on 127.0.0.1 (port 0:
any free port) and first prints ``listening http://127.0.0.1:<port>/rpc`` on stdout.  The switches
(see docs/external.md) simulate the misbehaviour the gateway must survive.  ``--grandchildren N``
processes are deliberately left behind at exit: reclaiming them is the transport's job.
``--ignore-stdin-eof`` keeps it running after stdin EOF (a provider that outlives its runtime).
``--state-file PATH`` keeps the sessions (ids, closed flag, events) in a JSON file, rewritten
atomically after each change and loaded at start: after a crash and restart, ``session.resume``
answers resumed=true with the stored lastSeq and ``event.stream`` replays the stored events.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from keel_stream.gateway.jsonrpc import Message, encode, encode_line
from keel_stream.gateway.protocol import ProviderKind
from keel_stream.gateway.sidecar_core import Outcome, RefSidecar, SidecarOptions, Subscription
from keel_stream.settings import process_environ

__all__ = ["check_env", "main", "parse_args", "run"]

_LIMIT = 16 * 1024 * 1024
_HOST = "127.0.0.1"
_DRAIN_S = 1.0
_KINDS = {"agent": ProviderKind.AGENT, "tool": ProviderKind.TOOL}


def _names(value: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in value.split(",") if name.strip())


def parse_args(argv: Sequence[str] | None = None) -> SidecarOptions:
    parser = argparse.ArgumentParser(prog="sidecar-ref", description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=sorted(_KINDS), default="agent")
    parser.add_argument("--http", type=int, default=None, metavar="PORT")
    parser.add_argument("--slow-ms", type=int, default=0)
    parser.add_argument("--ignore-cancel", action="store_true")
    parser.add_argument("--crash-after", type=int, default=None, metavar="N")
    parser.add_argument("--hang-handshake", action="store_true")
    parser.add_argument("--version-override", default=None, metavar="V")
    parser.add_argument("--forbid-env", type=_names, default=(), metavar="A,B")
    parser.add_argument("--require-env", type=_names, default=(), metavar="C")
    parser.add_argument("--grandchildren", type=int, default=0, metavar="N")
    parser.add_argument("--usage", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--state-file", default=None, metavar="PATH")
    parser.add_argument("--ignore-stdin-eof", action="store_true")
    parser.add_argument("--oversized-answer", type=int, default=0, metavar="BYTES")
    parser.add_argument("--ignore-sigterm", action="store_true")
    parser.add_argument("--flood", type=int, default=0, metavar="N")
    ns = parser.parse_args(argv)
    return SidecarOptions(
        kind=_KINDS[ns.kind],
        slow_ms=ns.slow_ms,
        ignore_cancel=ns.ignore_cancel,
        crash_after=ns.crash_after,
        hang_handshake=ns.hang_handshake,
        version_override=ns.version_override,
        forbid_env=ns.forbid_env,
        require_env=ns.require_env,
        grandchildren=ns.grandchildren,
        usage=ns.usage,
        http_port=ns.http,
        state_file=ns.state_file,
        ignore_stdin_eof=ns.ignore_stdin_eof,
        oversized_answer=ns.oversized_answer,
        ignore_sigterm=ns.ignore_sigterm,
        flood=ns.flood,
    )


def check_env(options: SidecarOptions, environ: dict[str, str]) -> str | None:
    """The refusal message when the environment breaks --forbid-env / --require-env."""
    forbidden = [name for name in options.forbid_env if name in environ]
    if forbidden:
        return f"refusing to start: forbidden environment variable(s) present: {forbidden}"
    missing = [name for name in options.require_env if name not in environ]
    if missing:
        return f"refusing to start: required environment variable(s) missing: {missing}"
    return None


def _spawn_grandchildren(count: int) -> list[subprocess.Popen[bytes]]:
    sleeper = [sys.executable, "-c", "import time; time.sleep(3600)"]
    devnull = subprocess.DEVNULL
    return [
        subprocess.Popen(sleeper, stdin=devnull, stdout=devnull, stderr=devnull)
        for _ in range(count)
    ]


def _write(message: Message) -> None:
    sys.stdout.buffer.write(encode_line(message))
    sys.stdout.buffer.flush()


async def _pump(queue: Subscription) -> None:
    while (notification := await queue.get()) is not None:
        _write(notification)


async def serve_stdio(sidecar: RefSidecar) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    stop = asyncio.Event()
    tasks: set[asyncio.Task[None]] = set()
    requests: set[asyncio.Task[None]] = set()

    def spawn(coro: Coroutine[Any, Any, None], *, request: bool = False) -> None:
        task = asyncio.create_task(coro)
        for group in (tasks, requests) if request else (tasks,):
            group.add(task)
            task.add_done_callback(group.discard)

    async def one(line: bytes) -> None:
        outcome = await sidecar.handle(line)
        if outcome.response is not None:
            _write(outcome.response)
        if outcome.subscription is not None:
            spawn(_pump(outcome.subscription))
        if outcome.shutdown:
            stop.set()

    async def read() -> None:
        while line := await reader.readline():
            if line.strip():
                spawn(one(line), request=True)
        if not sidecar.options.ignore_stdin_eof:  # else: live on until a signal, as a bad one
            stop.set()

    spawn(read())
    await stop.wait()
    if requests:  # stdin EOF: let answers already under way finish, briefly
        await asyncio.wait(requests, timeout=_DRAIN_S)
    sidecar.end_all()
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _sse(outcome: Outcome, sidecar: RefSidecar) -> AsyncIterator[bytes]:
    assert outcome.response is not None
    assert outcome.subscription is not None
    queue = outcome.subscription
    try:
        yield b"event: message\ndata: " + encode(outcome.response) + b"\n\n"
        while (notification := await queue.get()) is not None:
            yield b"event: message\ndata: " + encode(notification) + b"\n\n"
    finally:
        sidecar.unsubscribe(queue)


def build_app(sidecar: RefSidecar, shutdown: Callable[[], None]) -> Starlette:
    async def rpc(request: Request) -> Response:
        outcome = await sidecar.handle(await request.body())
        after = BackgroundTask(shutdown) if outcome.shutdown else None
        if outcome.response is None:
            return Response(status_code=202)
        if outcome.subscription is not None:
            return StreamingResponse(_sse(outcome, sidecar), media_type="text/event-stream")
        body = encode(outcome.response)
        return Response(body, media_type="application/json", background=after)

    return Starlette(routes=[Route("/rpc", rpc, methods=["POST"])])


async def serve_http(sidecar: RefSidecar, port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((_HOST, port))
    sock.listen(128)
    server: uvicorn.Server | None = None

    def shutdown() -> None:
        sidecar.end_all()
        if server is not None:
            server.should_exit = True

    config = uvicorn.Config(
        build_app(sidecar, shutdown),
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    print(f"listening http://{_HOST}:{sock.getsockname()[1]}/rpc", flush=True)
    with contextlib.closing(sock):
        await server.serve(sockets=[sock])
    sidecar.end_all()


def run(options: SidecarOptions, environ: Mapping[str, str]) -> int:
    """Run the sidecar until shutdown; the process exit status (``environ``: its environment,
    passed in by the command)."""
    refusal = check_env(options, dict(environ))
    if refusal is not None:
        print(refusal, file=sys.stderr, flush=True)
        return 2
    try:
        sidecar = RefSidecar(options)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"refusing to start: unreadable state file: {exc}", file=sys.stderr, flush=True)
        return 2
    if options.ignore_sigterm:  # only the reclaim's SIGKILL ends it
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _spawn_grandchildren(options.grandchildren)
    if options.http_port is not None:
        asyncio.run(serve_http(sidecar, options.http_port))
    else:
        asyncio.run(serve_stdio(sidecar))
    return 0


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point (python -m keel_stream.gateway.sidecar_ref): its environment read here."""
    sys.exit(run(parse_args(argv), process_environ()))


if __name__ == "__main__":
    main()
