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
import os
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson
from pydantic import ValidationError

from keel_stream.backoff import Backoff
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.config import ToolSpec
from keel_stream.gateway.config_errors import InvalidConfig
from keel_stream.gateway.connection import build_transport
from keel_stream.gateway.errors import BackendTimeout, GatewayError, ProtocolError
from keel_stream.gateway.protocol import Method, ProviderKind, ToolCallParams, ToolCallResult
from keel_stream.gateway.protocol import ToolSpec as ProvidedTool
from keel_stream.gateway.transport import Transport
from keel_stream.logs import get_logger

__all__ = [
    "ProviderConnection",
    "ToolProviders",
    "TransportFactory",
    "declared_transport",
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


def declared_transport(name: str, spec: ToolSpec, environ: Mapping[str, str]) -> Transport:
    """The transport a declaration names (stdio: minimal environment, budget); InvalidConfig
    when a variable it references is not set."""
    return build_transport(spec, environ, f"external.tools.{name}", ProviderKind.TOOL)


class ProviderConnection:
    """One declared ToolProvider of one tenant: connected on demand, reconnected with backoff."""

    def __init__(
        self,
        tenant: str,
        name: str,
        spec: ToolSpec,
        environ: Mapping[str, str],
        clock: Callable[[], float] = time.monotonic,
        transports: TransportFactory = declared_transport,
    ) -> None:
        self.tenant = tenant
        self.name = name
        self.spec = spec
        self.tools: tuple[ProvidedTool, ...] = ()
        self._environ = environ
        self._clock = clock
        self._transports = transports
        self._client: GatewayClient | None = None
        self._backoff = Backoff(initial=0.25, maximum=30.0)
        self._retry_at = 0.0
        self._closed = False
        self._lock = asyncio.Lock()
        self._log = get_logger("worker").bind(tenant=tenant, tool_provider=name)

    @property
    def declared_timeout_s(self) -> float | None:
        """The declaration's ``timeoutMs``, in seconds; None when it declares none."""
        return self.spec.timeout_ms / 1000 if self.spec.timeout_ms else None

    @property
    def timeout_s(self) -> float:
        return self.declared_timeout_s or DEFAULT_TIMEOUT_S

    @property
    def connected(self) -> bool:
        return self._client is not None and self._client.lost is None

    async def _connect(self) -> tuple[GatewayClient, tuple[ProvidedTool, ...]]:
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
        return client, tuple(tools)

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
            if self._client is not None:
                lost = self._client.lost or "closed"
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
                self._client, self.tools = await self._connect()
            except Exception as exc:  # noqa: BLE001 - a bad provider only loses its tools
                self._failed("tool provider unavailable: its tools are left out", _describe(exc))
                return False
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
        if not await self.ensure() or self._client is None:
            return f"tool provider {self.name!r} is unavailable; try again later", True
        try:
            result = await _call_tool(self._client, tool, arguments, timeout_s)
        except BackendTimeout:
            raise TimeoutError from None
        except Exception as exc:  # noqa: BLE001 - an error result, never a raise
            return f"tool {tool!r} of provider {self.name!r} failed: {_describe(exc)}", True
        self._backoff.reset()
        text = result_text(result.content)
        if result.is_error and not text.strip():
            text = f"tool {tool!r} of provider {self.name!r} reported an error"
        return text, result.is_error

    async def _drop(self) -> None:
        client, self._client, self.tools = self._client, None, ()
        if client is not None:
            with contextlib.suppress(Exception):
                await client.aclose()

    async def aclose(self) -> None:
        """Close the connection for good: a later use finds its tools absent."""
        self._closed = True
        async with self._lock:
            await self._drop()


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


def _describe(exc: Exception) -> str:
    if isinstance(exc, GatewayError):
        code = f", code {exc.rpc_code}" if exc.rpc_code is not None else ""
        return f"{exc.code}{code}: {exc.message}"
    if isinstance(exc, InvalidConfig):
        return exc.message
    return f"{exc.__class__.__name__}: {exc}"


class ToolProviders:
    """The worker's connections, per tenant and declared provider; a changed or removed
    declaration closes the old connection."""

    def __init__(
        self,
        environ: Mapping[str, str] | None = None,
        transports: TransportFactory = declared_transport,
    ) -> None:
        self._environ = os.environ if environ is None else environ
        self._transports = transports
        self._connections: dict[tuple[str, str], ProviderConnection] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def for_tenant(self, tenant: str, declared: Mapping[str, ToolSpec]) -> list[ProviderConnection]:
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
                connection = ProviderConnection(
                    tenant, name, spec, self._environ, transports=self._transports
                )
                self._connections[(tenant, name)] = connection
            found.append(connection)
        return found

    def _retire(self, connection: ProviderConnection) -> None:
        task = asyncio.create_task(connection.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every connection (stdio providers: their whole process group)."""
        connections, self._connections = list(self._connections.values()), {}
        closing = [c.aclose() for c in connections]
        await asyncio.gather(*closing, *self._closing, return_exceptions=True)
