"""Loading plugins: Python entry points in the groups ``keel_stream.tools``,
``keel_stream.providers`` and ``keel_stream.projections``.

Loading is deterministic (groups in GROUPS order; within one, by distribution name, then entry
point name) and each entry point is isolated: one that fails to import, names a wrong object or
collides with a name already taken (a built-in tool, a built-in model provider, an earlier
plugin's) is reported with status ``error`` and its message, and the others load. With
KEEL_PLUGINS_ENABLED set, only the distributions it lists load; the others are reported
``disabled`` and never imported.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any, Final

from keel_stream.logs import get_logger
from keel_stream.plugins.model import (
    GROUPS,
    EntryPointReport,
    Group,
    PluginReport,
    PluginTool,
    Status,
)
from keel_stream.plugins.tool_arguments import ArgumentsCheck, SchemaError

__all__ = [
    "BUILTIN_PROVIDERS",
    "BUILTIN_TOOLS",
    "PluginCatalog",
    "active_plugins",
    "enabled_from",
    "load_at_start",
    "load_plugins",
    "plugin_catalog",
    "stop_using_plugins",
]

BUILTIN_PROVIDERS: Final = frozenset({"openai", "fake"})
BUILTIN_TOOLS: Final = frozenset({"echo", "note", "sleep"})
"""The names the platform's own tools and model providers take: no plugin may (docs/plugins.md;
the worker's tools and providers are held to them by tests/unit/test_plugins_loading.py)."""
TOOL_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
_UNKNOWN: Final = "(no distribution)"


class Refused(Exception):
    """An entry point loaded but cannot be used (wrong object, name taken)."""


@dataclass(slots=True)
class PluginCatalog:
    """What the process loaded: the usable objects and the report of every plugin."""

    tools: dict[str, tuple[str, PluginTool]] = field(default_factory=dict)
    """Tool name -> (distribution, tool)."""
    providers: dict[str, Callable[..., Any]] = field(default_factory=dict)
    projections: dict[str, Any] = field(default_factory=dict)
    reports: dict[str, PluginReport] = field(default_factory=dict)

    def view(self) -> list[dict[str, Any]]:
        return [self.reports[name].view() for name in sorted(self.reports)]


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def enabled_from(raw: str | None) -> frozenset[str] | None:
    """The allowlist KEEL_PLUGINS_ENABLED spells (None: unset, everything loads)."""
    if raw is None:
        return None
    return frozenset(_normalized(part) for part in raw.split(",") if part.strip())


def _distribution(entry: EntryPoint) -> tuple[str, str]:
    dist = entry.dist
    if dist is None:
        return _UNKNOWN, ""
    return dist.metadata["Name"] or _UNKNOWN, dist.version or ""


def _ordered(groups: Iterable[Group]) -> list[tuple[Group, str, str, EntryPoint]]:
    found = []
    for group in groups:
        entries = [(group, *_distribution(e), e) for e in entry_points(group=str(group))]
        entries.sort(key=lambda item: (_normalized(item[1]), item[3].name, item[3].value))
        found.extend(entries)
    return found


def _tool(obj: Any) -> PluginTool:
    if not isinstance(obj, PluginTool) and callable(obj):
        obj = obj()
    if not isinstance(obj, PluginTool):
        raise Refused(f"not a keel_stream.plugins.PluginTool: {type(obj).__name__}")
    if not TOOL_NAME.fullmatch(obj.name) or "__" in obj.name:
        raise Refused(
            f"tool name {obj.name!r}: 1-64 of [A-Za-z0-9_-], without '__' (kept for the "
            "<provider>__<tool> names of tool providers)"
        )
    try:
        ArgumentsCheck(obj.parameters)
    except SchemaError as exc:
        raise Refused(
            f"tool {obj.name!r}: its parameters are not a JSON Schema: {exc.message}"
        ) from None
    return obj


def _projection(obj: Any) -> Any:
    if isinstance(obj, type):
        obj = obj()
    missing = [
        m
        for m in ("initial", "apply", "apply_many", "dump", "load")
        if not callable(getattr(obj, m, None))
    ]
    if missing:
        raise Refused(f"not a projection (projections.base.Projection): no {', '.join(missing)}")
    return obj


class _Loader:
    def __init__(self, reserved_tools: Collection[str]) -> None:
        self.catalog = PluginCatalog()
        self._reserved = set(reserved_tools)
        self._owners: dict[tuple[Group, str], str] = {}

    def take(self, group: Group, name: str, owner: str) -> None:
        if group == Group.TOOLS and name in self._reserved:
            raise Refused(f"tool name {name!r} is a built-in tool's")
        if group == Group.PROVIDERS and name in BUILTIN_PROVIDERS:
            raise Refused(f"model provider {name!r} is a built-in one")
        taken = self._owners.get((group, name))
        if taken is not None:
            raise Refused(f"{name!r} is already provided by {taken}")
        self._owners[(group, name)] = owner

    def load(self, group: Group, dist: str, entry: EntryPoint, report: PluginReport) -> None:
        obj = entry.load()
        owner = f"{dist} ({group}:{entry.name})"
        if group == Group.TOOLS:
            tool = _tool(obj)
            self.take(group, tool.name, owner)
            self.catalog.tools[tool.name] = (dist, tool)
            report.tools.append({"name": tool.name, "schemaDigest": tool.digest})
        elif group == Group.PROVIDERS:
            if not callable(obj):
                raise Refused("a model provider plugin must be a factory (model, limits)")
            self.take(group, entry.name, owner)
            self.catalog.providers[entry.name] = obj
        else:
            projection = _projection(obj)
            self.take(group, entry.name, owner)
            self.catalog.projections[entry.name] = projection


def load_plugins(
    enabled: Collection[str] | None = None,
    reserved_tools: Collection[str] = (),
    groups: Iterable[Group] = GROUPS,
) -> PluginCatalog:
    """Load every installed plugin (only ``enabled`` distributions when given); never raises
    for a plugin's failure."""
    loader = _Loader(reserved_tools)
    log = get_logger("plugins")
    for group, dist, version, entry in _ordered(groups):
        report = loader.catalog.reports.setdefault(dist, PluginReport(dist, version))
        if enabled is not None and _normalized(dist) not in enabled:
            status, error = Status.DISABLED, None
        else:
            try:
                loader.load(group, dist, entry, report)
                status, error = Status.LOADED, None
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - isolated, reported
                status, error = Status.ERROR, f"{exc.__class__.__name__}: {exc}"
                log.warning("plugin failed to load", plugin=dist, entry_point=entry.name,
                            group=str(group), error=error)  # fmt: skip
        report.entry_points.append(EntryPointReport(group, entry.name, entry.value, status, error))
    return loader.catalog


@functools.cache
def plugin_catalog(enabled: str | None) -> PluginCatalog:
    """The process's plugins, loaded once (at start, or at first use), with the built-in tool
    names reserved and the allowlist applied (``enabled``: the setting plugins_enabled,
    KEEL_PLUGINS_ENABLED, as the command read it)."""
    catalog = load_plugins(enabled_from(enabled), BUILTIN_TOOLS)
    get_logger("plugins").info(
        "plugins loaded",
        plugins={name: str(report.status) for name, report in catalog.reports.items()},
    )
    return catalog


_active: list[PluginCatalog] = []


def load_at_start(enabled: str | None) -> PluginCatalog:
    """Load the process's plugins (``enabled``: the setting plugins_enabled) and put them to use
    (a worker's start): from now on the toolbox offers their tools and model settings may name
    their providers. A process that never calls it (a library user, a unit test) runs without
    plugins."""
    catalog = plugin_catalog(enabled)
    _active[:] = [catalog]
    return catalog


def active_plugins() -> PluginCatalog:
    """The plugins in use: those load_at_start loaded, else none."""
    return _active[0] if _active else PluginCatalog()


def stop_using_plugins() -> None:
    """Undo load_at_start (tests); the loaded catalog stays cached."""
    _active.clear()
