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
from typing import Any

import orjson
from pydantic import ValidationError

from keel_stream.errors import (
    BackendTimeout,
    BackendUnavailable,
    ProtocolError,
)
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.connection import build_transport
from keel_stream.gateway.jsonrpc import DEFAULT_MAX_LINE_BYTES
from keel_stream.gateway.protocol import Method, ProviderKind, ToolCallParams, ToolCallResult
from keel_stream.gateway.protocol import ToolSpec as ProvidedTool
from keel_stream.gateway.transport import Transport
from keel_stream.tenancy.document import ToolSpec
from keel_stream.worker.mcp_connection import McpConnection
from keel_stream.worker.tool_connection import ToolConnection

__all__ = [
    "ProviderConnection",
    "ToolProviders",
    "TransportFactory",
    "declared_transport",
    "result_text",
]

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
