"""An MCP server as a tool source (``external.tools.<name>.protocol: "mcp"``), through the
official MCP Python SDK (``mcp.Client``): stdio (the SDK spawns the server in a new session and
reclaims it on close: stdin closed, a grace period, SIGTERM then SIGKILL to the group) or
Streamable HTTP (``url`` with the declared ``headers``).

The stdio server's environment is exactly the runtime's minimal one (MINIMAL_ENV) plus the
variables it declares: the SDK adds a few of the runtime's own variables (HOME, LOGNAME, PATH,
SHELL, TERM, USER) to whatever it is given, so the command is started through a tiny wrapper
(``python -I -S -c``) that drops every variable not on the list, then runs the server (and,
with a ``budget``, sets its rlimits first: keel_stream.gateway.budget) and relays its stdout line
by line: a line over ``max_line_bytes`` (KEEL_RPC_MAX_LINE_BYTES) kills the whole process group,
since the SDK's reader would buffer a line whole. Variable names, never values, are on its
command line.

The SDK's client lives in a task of its own (its anyio scopes must be left by the task that
entered them); calls are made from the callers' tasks. A call the connection cannot carry
(closed, broken, a transport error) marks the connection lost, so a later use reconnects after
the backoff; a server's own error (unknown tool, invalid params) is only an error result.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Final

import orjson
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CONNECTION_CLOSED,
    REQUEST_TIMEOUT,
    CallToolResult,
    Implementation,
    TextContent,
)

from keel_stream.gateway.budget import check, limits_of, wrap_command
from keel_stream.gateway.jsonrpc import DEFAULT_MAX_LINE_BYTES
from keel_stream.gateway.protocol import ToolSpec as ProvidedTool
from keel_stream.tenancy.document import (
    ToolSpec,
    minimal_env,
    resolve,
    resolved_args,
    resolved_url,
)
from keel_stream.worker.tool_connection import ToolConnection

__all__ = ["McpConnection", "call_result_text", "stdio_parameters"]

_PAGES: Final = 100
"""tools/list pages followed at most (a paginator that never ends cannot hang a connect)."""
_KEEP_ONLY: Final = """\
import os, signal, subprocess, sys
keep, limit = set(filter(None, sys.argv[1].split(","))), int(sys.argv[2])
for name in [n for n in os.environ if n not in keep]:
    del os.environ[name]
try:
    server = subprocess.Popen(sys.argv[3:], stdout=subprocess.PIPE)
except OSError as exc:
    print(f"cannot start {sys.argv[3]!r}: {exc}", file=sys.stderr, flush=True)
    os._exit(127)
out = sys.stdout.buffer
while line := server.stdout.readline(limit + 1):
    if len(line) > limit and not line.endswith(b"\\n"):
        print(f"the server sent a line over {limit} bytes", file=sys.stderr, flush=True)
        if os.getpgrp() == os.getpid():  # the group the SDK started: the server's all
            os.killpg(0, signal.SIGKILL)
        server.kill()
        os._exit(70)
    out.write(line)
    out.flush()
code = server.wait()
os._exit(code if code >= 0 else 128 - code)
"""
"""Runs the server with only the kept variables, and relays its stdout line by line: a line
over the limit ends the whole group (the SDK's own reader would buffer it whole)."""
_CLIENT_INFO: Final = Implementation(name="keel-stream", version="0.1.0")


def stdio_parameters(
    spec: ToolSpec,
    environ: Mapping[str, str],
    where: str,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> StdioServerParameters:
    """How the SDK starts a stdio server: the minimal environment plus what it declares
    (InvalidConfig when a reference is unset), its budget checked (BudgetRefused) and set, its
    lines bounded by ``max_line_bytes`` (a longer one: its process group is killed)."""
    assert spec.command is not None
    env = minimal_env(spec.env, environ, f"{where}.env")
    limits = limits_of(spec.budget)
    check(limits)
    command = wrap_command([spec.command, *resolved_args(spec, environ, where)], limits)
    keep = ",".join(sorted(env))
    return StdioServerParameters(
        command=sys.executable,
        args=["-I", "-S", "-c", _KEEP_ONLY, keep, str(max_line_bytes), *command],
        env=env,
    )


def call_result_text(result: CallToolResult) -> str:
    """A tools/call result as tool.result text: its text blocks joined by newlines when all
    blocks are text, else every block as JSON; structured content alone as JSON."""
    blocks = result.content
    if blocks and all(isinstance(b, TextContent) for b in blocks):
        return "\n".join(b.text for b in blocks if isinstance(b, TextContent))
    if not blocks and result.structured_content is not None:
        return orjson.dumps(result.structured_content, option=orjson.OPT_SORT_KEYS).decode()
    dumped = [b.model_dump(mode="json", by_alias=True, exclude_none=True) for b in blocks]
    return orjson.dumps(dumped, option=orjson.OPT_SORT_KEYS).decode()


def _first(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (anyio wraps a task's failure in one)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


@asynccontextmanager
async def _http_transport(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(url, http_client=http) as streams,
    ):
        yield streams


class _Session:
    """One SDK client, entered and left by a task of its own."""

    def __init__(self, target: StdioServerParameters | AbstractAsyncContextManager[Any]) -> None:
        self.lost: str | None = None
        self.client: Client | None = None
        self._target = target
        self._ready: asyncio.Future[tuple[ProvidedTool, ...]] | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, timeout_s: float) -> tuple[ProvidedTool, ...]:
        self._ready = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._serve(self._ready))
        try:
            async with asyncio.timeout(timeout_s):
                return await asyncio.shield(self._ready)
        except BaseException:
            await self.aclose()
            raise

    async def _serve(self, ready: asyncio.Future[tuple[ProvidedTool, ...]]) -> None:
        reason = "closed"
        try:
            async with Client(self._target, client_info=_CLIENT_INFO, cache=None) as client:
                tools = await _list_tools(client)
                self.client = client
                ready.set_result(tools)
                await self._stop.wait()
        except Exception as exc:  # noqa: BLE001 - reported to start(), or as the lost reason
            failure = _first(exc)
            reason = f"{failure.__class__.__name__}: {failure}"
            if not ready.done():
                ready.set_exception(failure if isinstance(failure, Exception) else exc)
        finally:
            self.client = None
            self.lost = self.lost or reason
            if not ready.done():
                ready.cancel()

    async def aclose(self) -> None:
        """Leave the client (stdio: the SDK's reclaim of the server's process group)."""
        self._stop.set()
        task = self._task
        if task is None:
            return
        if self._ready is not None and not self._ready.done():
            task.cancel()
        with contextlib.suppress(BaseException):
            await task


async def _list_tools(client: Client) -> tuple[ProvidedTool, ...]:
    tools: list[ProvidedTool] = []
    cursor: str | None = None
    for _ in range(_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools += [
            ProvidedTool(name=t.name, description=t.description or "", input_schema=t.input_schema)
            for t in page.tools
        ]
        cursor = page.next_cursor
        if cursor is None:
            break
    return tuple(tools)


class McpConnection(ToolConnection):
    """A declared MCP server of one tenant."""

    protocol = "mcp"

    def __init__(
        self, *args: Any, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.max_line_bytes = max_line_bytes
        self._session: _Session | None = None

    def _up(self) -> bool:
        return self._session is not None and self._session.lost is None

    def _lost(self) -> str:
        return (self._session.lost if self._session is not None else None) or "closed"

    def _target(self) -> StdioServerParameters | AbstractAsyncContextManager[Any]:
        where = f"external.tools.{self.name}"
        if self.spec.transport == "stdio":
            return stdio_parameters(self.spec, self._environ, where, self.max_line_bytes)
        assert self.spec.url is not None
        headers = resolve(self.spec.headers, self._environ, f"{where}.headers")
        return _http_transport(resolved_url(self.spec, self._environ, where), headers)

    async def _open(self) -> tuple[ProvidedTool, ...]:
        session = _Session(self._target())
        tools = await session.start(self.timeout_s)
        self._session = session
        return tools

    async def _invoke(
        self, tool: str, arguments: Mapping[str, Any], timeout_s: float
    ) -> tuple[str, bool]:
        session = self._session
        client = session.client if session is not None else None
        if session is None or client is None:
            raise ConnectionError("not connected")
        try:
            result = await client.call_tool(tool, dict(arguments), read_timeout_seconds=timeout_s)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise TimeoutError from None
            if exc.code == CONNECTION_CLOSED:
                session.lost = f"connection closed: {exc.message}"
            raise
        except Exception as exc:
            session.lost = f"{exc.__class__.__name__}: {exc}"
            raise
        return call_result_text(result), result.is_error

    async def _shutdown(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.aclose()
