"""One attempt's tools: the built-ins beside the tools of the tenant's ToolProviders.

A provider's tool is offered to the model as ``<provider>__<tool>`` (OpenAI function names
allow only ``[a-zA-Z0-9_-]``, at most 64 characters; other characters become ``_``). Built-in
names have no ``__``, so they never collide with a provider's.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from keel_stream.logs import get_logger
from keel_stream.worker.providers.base import ToolSpec
from keel_stream.worker.tool_providers import ProviderConnection
from keel_stream.worker.tools import TOOLS, run_tool

__all__ = ["SEPARATOR", "Toolbox", "exposed_name"]

SEPARATOR: Final = "__"
_NOT_ALLOWED: Final = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME: Final = 64
_ANY_OBJECT: Final = {"type": "object"}


def exposed_name(provider: str, tool: str) -> str | None:
    """The model's name for a provider's tool; None if it would be too long."""
    name = _NOT_ALLOWED.sub("_", f"{provider}{SEPARATOR}{tool}")
    return name if len(name) <= _MAX_NAME else None


class Toolbox:
    def __init__(self, connections: Sequence[ProviderConnection] = ()) -> None:
        self._connections = connections
        self._routes: dict[str, tuple[ProviderConnection, str]] = {}
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
            self._routes[name] = (connection, tool.name)
            schema = tool.input_schema or _ANY_OBJECT
            offered.append(ToolSpec(name, tool.description, schema))
        return offered

    async def run(self, name: str, arguments: Any) -> tuple[str, bool]:
        """Run a call; (text, is_error). Never raises for a tool's or a provider's failure."""
        if name in TOOLS or SEPARATOR not in name:
            return await run_tool(name, arguments)
        if name not in self._routes and self._connections:
            await self.specs()  # a call answered after a takeover: nothing listed yet
        route = self._routes.get(name)
        if route is None:
            return f"unknown tool {name!r} (no declared tool provider offers it now)", True
        if not isinstance(arguments, Mapping):
            return "tool arguments must be a JSON object", True
        connection, tool = route
        return await connection.call(tool, arguments)
