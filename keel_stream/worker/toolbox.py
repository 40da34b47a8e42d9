"""One attempt's tools: the built-ins beside the tools of the tenant's ToolProviders.

A provider's tool is offered to the model as ``<provider>__<tool>`` (OpenAI function names
allow only ``[a-zA-Z0-9_-]``, at most 64 characters; other characters become ``_``). Built-in
names have no ``__``, so they never collide with a provider's.

Every call is checked before it runs (keel_stream.worker.tool_arguments: a provider's tool
against its ``inputSchema``) and bounded in time: KEEL_TOOL_TIMEOUT_S, or the provider's
declared ``timeoutMs`` for its tools. A refused or timed-out call is an isError result.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from keel_stream.logs import get_logger
from keel_stream.worker.limits import ToolLimits
from keel_stream.worker.output_bounds import bounded_text
from keel_stream.worker.providers.base import ToolSpec
from keel_stream.worker.tool_arguments import ArgumentsCheck, SchemaError
from keel_stream.worker.tool_providers import ProviderConnection
from keel_stream.worker.tools import TOOLS, run_tool, within

__all__ = ["SEPARATOR", "Toolbox", "exposed_name"]

SEPARATOR: Final = "__"
_NOT_ALLOWED: Final = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME: Final = 64
_ANY_OBJECT: Final = {"type": "object"}


def exposed_name(provider: str, tool: str) -> str | None:
    """The model's name for a provider's tool; None if it would be too long."""
    name = _NOT_ALLOWED.sub("_", f"{provider}{SEPARATOR}{tool}")
    return name if len(name) <= _MAX_NAME else None


class _Route:
    """Where a provider's tool is called, and the check of its arguments."""

    def __init__(self, connection: ProviderConnection, tool: str, check: ArgumentsCheck) -> None:
        self.connection = connection
        self.tool = tool
        self.check = check


class Toolbox:
    def __init__(
        self, connections: Sequence[ProviderConnection] = (), limits: ToolLimits | None = None
    ) -> None:
        self._connections = connections
        self._limits = limits or ToolLimits.from_environment()
        self._routes: dict[str, _Route] = {}
        self._log = get_logger("worker")

    async def specs(self) -> list[ToolSpec]:
        """The tools for the next request: the built-ins, then each provider's that is up."""
        specs = [tool.spec for tool in TOOLS.values()]
        if not self._connections:
            return specs
        up = await asyncio.gather(*(c.ensure() for c in self._connections))
        self._routes = {}
        for connection, connected in zip(self._connections, up, strict=True):
            if connected:
                specs += self._offer(connection)
        return specs

    def _offer(self, connection: ProviderConnection) -> list[ToolSpec]:
        offered = []
        for tool in connection.tools:
            name = exposed_name(connection.name, tool.name)
            if name is None or name in self._routes:
                self._log.warning(
                    "provider tool left out: its name is too long or taken",
                    tool_provider=connection.name,
                    tool=tool.name,
                )
                continue
            schema = tool.input_schema or _ANY_OBJECT
            self._routes[name] = _Route(connection, tool.name, self._check(name, schema))
            offered.append(ToolSpec(name, tool.description, schema))
        return offered

    def _check(self, name: str, schema: Mapping[str, Any]) -> ArgumentsCheck:
        try:
            return ArgumentsCheck(schema)
        except SchemaError as exc:
            self._log.warning(
                "provider tool schema is not a JSON Schema: its arguments are not checked",
                tool=name,
                error=exc.message,
            )
            return ArgumentsCheck(None)

    def timeout_s(self, name: str) -> float:
        """The bound of a call: the provider's timeoutMs for its tools, else the setting."""
        route = self._routes.get(name)
        declared = route.connection.declared_timeout_s if route is not None else None
        return declared or self._limits.timeout_s

    async def run(self, name: str, arguments: Any) -> tuple[str, bool]:
        """Run a call within its timeout; (text, is_error), the text cut to what one event can
        hold. Never raises for a tool's or a provider's failure, nor for a call that takes too
        long."""
        text, is_error = await self._run(name, arguments)
        return bounded_text(text), is_error

    async def _run(self, name: str, arguments: Any) -> tuple[str, bool]:
        if name in TOOLS or SEPARATOR not in name:
            return await within(name, run_tool(name, arguments), self._limits.timeout_s)
        if name not in self._routes and self._connections:
            # A call answered after a takeover: nothing listed yet (each connection's requests
            # have its timeoutMs).
            await self.specs()
        route = self._routes.get(name)
        if route is None:
            return f"unknown tool {name!r} (no declared tool provider offers it now)", True
        problem = route.check.problem(name, arguments)
        if problem is not None:
            return problem, True
        return await route.connection.call(route.tool, arguments, self.timeout_s(name))
