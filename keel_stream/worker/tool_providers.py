"""Connections to the ToolProviders a tenant's document declares (``external.tools``).

A connection starts when first needed (stdio: the provider process with only the minimal
environment plus what it declares, and its budget; http: its URL with the declared headers),
lists the tools (the initialize result's, else ``tools.list``) and is kept for reuse; every
request has the declared ``timeoutMs`` (default 30 s), except that ``tools.call`` waits as long
as its caller says (the toolbox: ``timeoutMs`` when declared, else KEEL_TOOL_TIMEOUT_S). A
connection that died, or could not be made, is tried again on a later use once a backoff has
passed. A provider that cannot start, refuses the handshake or times out only loses its tools
for that turn (with a warning): nothing here raises for a provider's failure.
``ToolProviders.aclose`` closes them all (for stdio, the process-group reclaim); a closed
connection never connects again.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, Final

import orjson
from pydantic import ValidationError

from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.connection import build_transport
from keel_stream.gateway.errors import (
    BackendTimeout,
    BackendUnavailable,
    GatewayError,
    ProtocolError,
)
from keel_stream.gateway.jsonrpc import DEFAULT_MAX_LINE_BYTES
from keel_stream.gateway.protocol import Method, ProviderKind, ToolCallParams, ToolCallResult
from keel_stream.gateway.protocol import ToolSpec as ProvidedTool
from keel_stream.gateway.transport import Transport
from keel_stream.logs import get_logger
from keel_stream.retry import Backoff
from keel_stream.tenancy.document import ToolSpec
from keel_stream.tenancy.errors import InvalidConfig

__all__ = [
    "ProviderConnection",
    "ToolConnection",
    "ToolProviders",
    "TransportFactory",
    "declared_transport",
    "describe",
    "result_text",
]

DEFAULT_TIMEOUT_S: Final = 30.0

TransportFactory = Callable[[str, ToolSpec, Mapping[str, str]], Transport]
"""(provider name, its declaration, the runtime's environment) -> a fresh transport."""


def result_text(content: Any) -> str:
    """A tools.call result's content as tool.result text: a string as is, else its JSON."""
    if isinstance(content, str):
        return content
    return orjson.dumps(content, option=orjson.OPT_SORT_KEYS).decode()


def declared_transport(
    name: str,
    spec: ToolSpec,
    environ: Mapping[str, str],
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> Transport:
    """The transport a declaration names (stdio: minimal environment, budget; every message
    bounded by ``max_line_bytes``); InvalidConfig when a variable it references is not set."""
    where = f"external.tools.{name}"
    return build_transport(spec, environ, where, ProviderKind.TOOL, max_line_bytes=max_line_bytes)


class ToolConnection:
    """One declared tool server of one tenant: connected on demand, reconnected with backoff.
    Subclasses speak a protocol (``_open``, ``_up``, ``_lost``, ``_invoke``, ``_shutdown``)."""

    protocol: str = "keel"

    def __init__(
        self,
        tenant: str,
        name: str,
        spec: ToolSpec,
        environ: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tenant = tenant
        self.name = name
        self.spec = spec
        self.tools: tuple[ProvidedTool, ...] = ()
        self._environ = environ
        self._clock = clock
        self._backoff = Backoff(initial_s=0.25, maximum_s=30.0)
        self._retry_at = 0.0
        self._closed = False
        self._opened = False
        self._lock = asyncio.Lock()
        self._log = get_logger("worker").bind(
            tenant=tenant, tool_provider=name, protocol=self.protocol
        )

    @property
    def declared_timeout_s(self) -> float | None:
        """The declaration's ``timeoutMs``, in seconds; None when it declares none."""
        return self.spec.timeout_ms / 1000 if self.spec.timeout_ms else None

    @property
    def timeout_s(self) -> float:
        return self.declared_timeout_s or DEFAULT_TIMEOUT_S

    @property
    def connected(self) -> bool:
        return self._opened and self._up()

    def _up(self) -> bool:
        raise NotImplementedError

    def _lost(self) -> str:
        """Why an opened connection is no longer up."""
        raise NotImplementedError

    async def _open(self) -> tuple[ProvidedTool, ...]:
        """Connect and list the tools; on any failure nothing of the connection stays."""
        raise NotImplementedError

    async def _invoke(
        self, tool: str, arguments: Mapping[str, Any], timeout_s: float
    ) -> tuple[str, bool]:
        """One call; TimeoutError when the server did not answer in time."""
        raise NotImplementedError

    async def _shutdown(self) -> None:
        raise NotImplementedError

    def _failed(self, what: str, error: str) -> None:
        delay = self._backoff.next_delay()
        self._retry_at = self._clock() + delay
        self._log.warning(what, error=error, retry_in_s=round(delay, 2))

    async def ensure(self) -> bool:
        """Connected now (True), or not (False: a warning was logged; its tools are absent)."""
        if self.connected:
            return True
        async with self._lock:
            if self.connected:
                return True
            if self._closed:
                return False
            if self._opened:
                lost = self._lost()
                await self._drop()
                self._failed("tool provider connection lost", lost)
            wait_s = self._retry_at - self._clock()
            if wait_s > 0:
                self._log.warning(
                    "tool provider unavailable: its tools are left out of this turn",
                    retry_in_s=round(wait_s, 2),
                )
                return False
            try:
                self.tools = await self._open()
            except Exception as exc:  # noqa: BLE001 - a bad provider only loses its tools
                self._failed("tool provider unavailable: its tools are left out", describe(exc))
                return False
            self._opened = True
            self._log.info("tool provider connected", tools=[t.name for t in self.tools])
            return True

    async def call(
        self, tool: str, arguments: Mapping[str, Any], timeout_s: float | None = None
    ) -> tuple[str, bool]:
        """Call a tool within ``timeout_s`` (None: the connection's timeout), connecting first
        if need be; (text, is_error). Every failure is an error result, never a raise."""
        timeout_s = timeout_s or self.timeout_s
        try:
            # One bound for connecting, sending and the answer (the request has it too).
            async with asyncio.timeout(timeout_s):
                return await self._call(tool, arguments, timeout_s)
        except TimeoutError:
            pass
        return f"tool {tool!r} of provider {self.name!r} timed out after {timeout_s:g} s", True

    async def _call(
        self, tool: str, arguments: Mapping[str, Any], timeout_s: float
    ) -> tuple[str, bool]:
        if not await self.ensure():
            return f"tool provider {self.name!r} is unavailable; try again later", True
        try:
            text, is_error = await self._invoke(tool, arguments, timeout_s)
        except TimeoutError:
            raise
        except Exception as exc:  # noqa: BLE001 - an error result, never a raise
            return f"tool {tool!r} of provider {self.name!r} failed: {describe(exc)}", True
        self._backoff.reset()
        if is_error and not text.strip():
            text = f"tool {tool!r} of provider {self.name!r} reported an error"
        return text, is_error

    async def _drop(self) -> None:
        self._opened, self.tools = False, ()
        with contextlib.suppress(Exception):
            await self._shutdown()

    async def aclose(self) -> None:
        """Close the connection for good: a later use finds its tools absent."""
        self._closed = True
        async with self._lock:
            await self._drop()


class ProviderConnection(ToolConnection):
    """A keel ToolProvider (``protocol: keel``): the gateway's JSON-RPC client."""

    def __init__(
        self,
        tenant: str,
        name: str,
        spec: ToolSpec,
        environ: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
        transports: TransportFactory = declared_transport,
    ) -> None:
        super().__init__(tenant, name, spec, environ, clock)
        self._transports = transports
        self._client: GatewayClient | None = None

    def _up(self) -> bool:
        return self._client is not None and self._client.lost is None

    def _lost(self) -> str:
        return (self._client.lost if self._client is not None else None) or "closed"

    async def _open(self) -> tuple[ProvidedTool, ...]:
        transport = self._transports(self.name, self.spec, self._environ)
        client = GatewayClient(transport, ProviderKind.TOOL, timeout_s=self.timeout_s)
        try:
            await client.start()
            tools = (await client.initialize()).tools or (await client.list_tools()).tools
        except BaseException:
            # Cancelled or failed half-way: nothing of the provider may stay behind.
            with contextlib.suppress(Exception):
                await client.aclose()
            raise
        self._client = client
        return tuple(tools)

    async def _invoke(
        self, tool: str, arguments: Mapping[str, Any], timeout_s: float
    ) -> tuple[str, bool]:
        if self._client is None:
            raise BackendUnavailable("not connected")
        try:
            result = await _call_tool(self._client, tool, arguments, timeout_s)
        except BackendTimeout:
            raise TimeoutError from None
        return result_text(result.content), result.is_error

    async def _shutdown(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


async def _call_tool(
    client: GatewayClient, tool: str, arguments: Mapping[str, Any], timeout_s: float
) -> ToolCallResult:
    """``tools.call`` with its own timeout (GatewayClient.call_tool has the connection's)."""
    params = ToolCallParams(name=tool, arguments=dict(arguments))
    raw = await client.request(Method.TOOLS_CALL, params, timeout_s)
    try:
        return ToolCallResult.model_validate(raw)
    except ValidationError as exc:
        raise ProtocolError(f"invalid {Method.TOOLS_CALL} result: {exc}") from exc


def describe(exc: Exception) -> str:
    """A failure as one line for a tool.result or a log (never a secret: no values)."""
    if isinstance(exc, GatewayError):
        code = f", code {exc.rpc_code}" if exc.rpc_code is not None else ""
        return f"{exc.code}{code}: {exc.message}"
    if isinstance(exc, InvalidConfig):
        return exc.message
    return f"{exc.__class__.__name__}: {exc}"


class ToolProviders:
    """The worker's connections, per tenant and declared provider; a changed or removed
    declaration closes the old connection. A declaration's ``protocol`` picks the connection:
    ``keel`` (ProviderConnection) or ``mcp`` (keel_stream.worker.mcp_connection)."""

    def __init__(
        self,
        environ: Mapping[str, str],
        transports: TransportFactory | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        """``max_line_bytes`` (KEEL_RPC_MAX_LINE_BYTES) bounds every message of a keel
        ToolProvider; ``transports`` replaces how they are reached (tests)."""
        self._environ = environ
        self._max_line_bytes = max_line_bytes
        self._transports = transports or partial(declared_transport, max_line_bytes=max_line_bytes)
        self._connections: dict[tuple[str, str], ToolConnection] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def _connect(self, tenant: str, name: str, spec: ToolSpec) -> ToolConnection:
        if spec.protocol == "mcp":
            from keel_stream.worker.mcp_connection import McpConnection

            return McpConnection(
                tenant, name, spec, self._environ, max_line_bytes=self._max_line_bytes
            )
        return ProviderConnection(tenant, name, spec, self._environ, transports=self._transports)

    def for_tenant(self, tenant: str, declared: Mapping[str, ToolSpec]) -> list[ToolConnection]:
        """The tenant's connections for its declared providers (none are started here)."""
        for key in [k for k in self._connections if k[0] == tenant]:
            old = self._connections[key]
            if declared.get(key[1]) != old.spec:
                del self._connections[key]
                self._retire(old)
        found = []
        for name, spec in sorted(declared.items()):
            connection = self._connections.get((tenant, name))
            if connection is None:
                connection = self._connect(tenant, name, spec)
                self._connections[(tenant, name)] = connection
            found.append(connection)
        return found

    def _retire(self, connection: ToolConnection) -> None:
        task = asyncio.create_task(connection.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every connection (stdio providers: their whole process group)."""
        connections, self._connections = list(self._connections.values()), {}
        closing = [c.aclose() for c in connections]
        await asyncio.gather(*closing, *self._closing, return_exceptions=True)
