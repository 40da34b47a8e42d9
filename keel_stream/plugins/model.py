"""What a plugin provides, and what loading it found.

A tool plugin is a ``PluginTool``: its name, description, JSON Schema and an async callable that
takes the (already checked) arguments and answers text. A provider plugin is a factory
``(model, limits) -> Provider``. A projection plugin is a pure fold following
``projections.base.Projection`` (``initial``, ``apply``, ``apply_many``, ``dump``, ``load``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Final

import orjson

__all__ = [
    "GROUPS",
    "EntryPointReport",
    "Group",
    "PluginReport",
    "PluginTool",
    "Status",
    "schema_digest",
]


class Group(StrEnum):
    TOOLS = "keel_stream.tools"
    PROVIDERS = "keel_stream.providers"
    PROJECTIONS = "keel_stream.projections"


GROUPS: Final = (Group.TOOLS, Group.PROVIDERS, Group.PROJECTIONS)
"""Loaded in this order; within a group by distribution name, then entry point name."""


class Status(StrEnum):
    LOADED = "loaded"
    ERROR = "error"
    DISABLED = "disabled"


def schema_digest(name: str, description: str, parameters: Mapping[str, Any]) -> str:
    """``sha256:<hex>`` of the tool as the model sees it (name, description, schema), in
    canonical JSON: a changed description changes it too (a reworded tool is a changed tool)."""
    shown = {"name": name, "description": description, "parameters": parameters}
    canonical = orjson.dumps(shown, option=orjson.OPT_SORT_KEYS)
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


@dataclass(frozen=True, slots=True)
class PluginTool:
    """A tool a plugin provides (the object its ``keel_stream.tools`` entry point names, or a
    callable without arguments returning it)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    run: Callable[[Mapping[str, Any]], Awaitable[str]]

    @property
    def digest(self) -> str:
        return schema_digest(self.name, self.description, self.parameters)


@dataclass(frozen=True, slots=True)
class EntryPointReport:
    group: str
    name: str
    value: str
    status: Status
    error: str | None = None

    def view(self) -> dict[str, Any]:
        return {
            "group": self.group,
            "name": self.name,
            "value": self.value,
            "status": str(self.status),
            "error": self.error,
        }


@dataclass(slots=True)
class PluginReport:
    """One installed distribution that advertises keel-stream entry points."""

    distribution: str
    version: str
    entry_points: list[EntryPointReport] = field(default_factory=list)
    tools: list[dict[str, str]] = field(default_factory=list)
    """``{name, schemaDigest}`` of each tool it provides that loaded."""

    @property
    def status(self) -> Status:
        states = {e.status for e in self.entry_points}
        if Status.ERROR in states:
            return Status.ERROR
        if states == {Status.DISABLED}:
            return Status.DISABLED
        return Status.LOADED

    @property
    def error(self) -> str | None:
        errors = [f"{e.group}:{e.name}: {e.error}" for e in self.entry_points if e.error]
        return "; ".join(errors) or None

    def view(self) -> dict[str, Any]:
        groups: dict[str, list[str]] = {}
        for entry in self.entry_points:
            groups.setdefault(entry.group, []).append(entry.name)
        return {
            "distribution": self.distribution,
            "version": self.version,
            "status": str(self.status),
            "error": self.error,
            "entryPoints": groups,
            "details": [e.view() for e in self.entry_points],
            "tools": list(self.tools),
        }
