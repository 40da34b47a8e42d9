"""One declared tool server of one tenant, whatever its protocol: connected on demand, its
tools listed, reconnected after a backoff, every failure an error result (never a raise).

The protocols subclass it: keel ToolProviders (keel_stream.worker.tool_providers) and MCP servers
(keel_stream.worker.mcp_connection); ``ToolProviders`` picks one per declaration.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from keel_stream.errors import GatewayError, InvalidConfig
from keel_stream.gateway.protocol import ToolSpec as ProvidedTool
from keel_stream.logs import get_logger
from keel_stream.retry import Backoff
from keel_stream.tenancy.document import ToolSpec

__all__ = ["DEFAULT_TIMEOUT_S", "ToolConnection", "describe"]

DEFAULT_TIMEOUT_S: Final = 30.0


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


def describe(exc: Exception) -> str:
    """A failure as one line for a tool.result or a log (never a secret: no values)."""
    if isinstance(exc, GatewayError):
        code = f", code {exc.rpc_code}" if exc.rpc_code is not None else ""
        return f"{exc.code}{code}: {exc.message}"
    if isinstance(exc, InvalidConfig):
        return exc.message
    return f"{exc.__class__.__name__}: {exc}"
