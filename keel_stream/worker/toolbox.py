"""One attempt's tools: the built-ins, the plugins' tools and the tools of the tenant's tool
providers (keel ToolProviders and MCP servers).

A provider's tool is offered to the model as ``<provider>__<tool>`` (OpenAI function names
allow only ``[a-zA-Z0-9_-]``, at most 64 characters; other characters become ``_``). Built-in
and plugin tool names have no ``__`` (the plugin loader refuses one), so they never collide
with a provider's; a plugin tool named like a built-in or an earlier plugin's is refused when
plugins load.

Every call is checked before it runs (keel_stream.worker.tool_arguments: against the tool's
schema) and bounded in time: KEEL_TOOL_TIMEOUT_S, or the provider's declared ``timeoutMs`` for
its tools. A refused or timed-out call is an isError result. Schemas are pinned per session
(keel_stream.plugins.pinning): a tool whose schema changed since the session pinned it is not
offered and not run.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

from keel_stream.logs import get_logger
from keel_stream.plugins import PluginCatalog, PluginTool, active_plugins, schema_digest
from keel_stream.plugins.pinning import (
    BUILTIN,
    SCHEMA_CHANGED,
    Pin,
    catalog_of,
    changed_message,
)
from keel_stream.plugins.tool_arguments import ArgumentsCheck, SchemaError
from keel_stream.worker.limits import ToolLimits
from keel_stream.worker.output_bounds import bounded_text
from keel_stream.worker.providers.base import ToolSpec
from keel_stream.worker.tool_connection import ToolConnection
from keel_stream.worker.tools import TOOLS, BuiltinContext, ToolFailed, run_tool, within

__all__ = ["SEPARATOR", "Toolbox", "exposed_name"]

SEPARATOR: Final = "__"
_NOT_ALLOWED: Final = re.compile(r"[^A-Za-z0-9_-]")
_MAX_NAME: Final = 64
_ANY_OBJECT: Final = {"type": "object"}
_PLUGIN_CHECKS: dict[str, ArgumentsCheck] = {}
"""A plugin tool's check, by its digest (its schema was checked when it loaded)."""


def exposed_name(provider: str, tool: str) -> str | None:
    """The model's name for a provider's tool; None if it would be too long."""
    name = _NOT_ALLOWED.sub("_", f"{provider}{SEPARATOR}{tool}")
    return name if len(name) <= _MAX_NAME else None


def _digest(spec: ToolSpec) -> str:
    return schema_digest(spec.name, spec.description, spec.parameters)


async def _run_plugin(tool: PluginTool, arguments: Mapping[str, Any]) -> tuple[str, bool]:
    try:
        text = await tool.run(arguments)
    except ToolFailed as exc:
        return str(exc), True
    except Exception as exc:  # noqa: BLE001 - a tool's own failure is its result
        return f"{tool.name} failed: {exc.__class__.__name__}: {exc}", True
    if not isinstance(text, str):
        return f"{tool.name} failed: it answered {type(text).__name__}, not text", True
    return text, False


class _Route:
    """Where a provider's tool is called, and the check of its arguments."""

    def __init__(
        self, connection: ToolConnection, tool: str, check: ArgumentsCheck, source: str
    ) -> None:
        self.connection = connection
        self.tool = tool
        self.check = check
        self.source = source


class Toolbox:
    def __init__(
        self,
        connections: Sequence[ToolConnection] = (),
        limits: ToolLimits | None = None,
        *,
        plugins: PluginCatalog | None = None,
        pins: Mapping[str, Pin] | None = None,
        builtins: BuiltinContext | None = None,
    ) -> None:
        self._connections = connections
        self._builtins = builtins or BuiltinContext()
        self._limits = limits or ToolLimits()
        self._plugins = active_plugins() if plugins is None else plugins
        self._pins = dict(pins or {})
        self._routes: dict[str, _Route] = {}
        self._log = get_logger("worker")

    async def specs(self) -> list[ToolSpec]:
        """The tools for the next request: the built-ins, the plugins', then each provider's
        that is up; a tool whose schema changed since the session pinned it is left out."""
        candidates = [(tool.spec, BUILTIN) for tool in TOOLS.values()]
        for dist, tool in self._plugins.tools.values():
            spec = ToolSpec(tool.name, tool.description, tool.parameters)
            candidates.append((spec, f"plugin:{dist}"))
        if self._connections:
            up = await asyncio.gather(*(c.ensure() for c in self._connections))
            self._routes = {}
            for connection, connected in zip(self._connections, up, strict=True):
                if connected:
                    candidates += self._offer(connection)
        return [spec for spec, source in candidates if self._pin(spec, source) is None]

    def catalog(self) -> list[dict[str, str]]:
        """``[{name, source, schemaDigest}]`` for the assistant.message: every tool the session
        was offered, with the digest it was pinned with."""
        return catalog_of(self._pins, ())

    def _pin(self, spec: ToolSpec, source: str) -> str | None:
        """Pin a tool the session has not seen; why it must not be used when its schema
        differs from its pin (None: it may)."""
        digest = _digest(spec)
        pinned = self._pins.setdefault(spec.name, Pin(spec.name, source, digest))
        if pinned.digest == digest or source == BUILTIN:
            return None
        self._log.warning(
            "tool schema changed since the session pinned it: the tool is withheld",
            tool=spec.name, source=source, pinned=pinned.digest, now=digest,
        )  # fmt: skip
        SCHEMA_CHANGED.labels(source.split(":", 1)[0]).inc()
        return changed_message(spec.name, pinned, digest)

    def _offer(self, connection: ToolConnection) -> list[tuple[ToolSpec, str]]:
        offered = []
        source = f"{connection.protocol if connection.protocol == 'mcp' else 'provider'}:"
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
            route = _Route(
                connection, tool.name, self._check(name, schema), source + connection.name
            )
            self._routes[name] = route
            offered.append((ToolSpec(name, tool.description, schema), route.source))
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
        if name in TOOLS:
            call = run_tool(name, arguments, self._builtins)
            return await within(name, call, self._limits.timeout_s)
        plugin = self._plugins.tools.get(name)
        if plugin is not None:
            return await self._run_plugin(*plugin, arguments)
        if SEPARATOR not in name:
            return await run_tool(name, arguments)
        if name not in self._routes and self._connections:
            # A call answered after a takeover: nothing listed yet (each connection's requests
            # have its timeoutMs).
            await self.specs()
        route = self._routes.get(name)
        if route is None:
            return f"unknown tool {name!r} (no declared tool provider offers it now)", True
        tool = next((t for t in route.connection.tools if t.name == route.tool), None)
        schema = (tool.input_schema if tool is not None else None) or _ANY_OBJECT
        spec = ToolSpec(name, tool.description if tool is not None else "", schema)
        changed = self._pin(spec, route.source)
        if changed is not None:
            return changed, True
        problem = route.check.problem(name, arguments)
        if problem is not None:
            return problem, True
        return await route.connection.call(route.tool, arguments, self.timeout_s(name))

    async def _run_plugin(self, dist: str, tool: PluginTool, arguments: Any) -> tuple[str, bool]:
        spec = ToolSpec(tool.name, tool.description, tool.parameters)
        changed = self._pin(spec, f"plugin:{dist}")
        if changed is not None:
            return changed, True
        check = _PLUGIN_CHECKS.get(tool.digest)
        if check is None:
            check = _PLUGIN_CHECKS[tool.digest] = ArgumentsCheck(tool.parameters)
        problem = check.problem(tool.name, arguments)
        if problem is not None:
            return problem, True
        return await within(tool.name, _run_plugin(tool, arguments), self._limits.timeout_s)
