"""Tool schemas pinned per session.

Each ``assistant.message`` records the tools of its request as ``tools: [{name, source,
schemaDigest}]``: for every tool the session has been offered so far, the digest it was first
offered with (keel_stream.plugins.model.schema_digest: name, description and JSON Schema). The
next request of the session reads the latest such list back (``pins_in``) and compares: a
tool from a plugin, a tool provider or an MCP server whose digest differs from its pin is not
offered, and a call to it is answered with an isError result without running it (a warning, and
the counter keel_worker_tool_schema_changed_total). The pin does not move: the changed tool
stays out for the rest of the session; a new session pins the new schema (docs/plugins.md).
Built-in tools ship with the worker and are recorded but never withheld.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from prometheus_client import Counter

from keel_stream.kernel import Event, Kind

__all__ = ["BUILTIN", "SCHEMA_CHANGED", "Pin", "catalog_of", "changed_message", "pins_in"]

BUILTIN: Final = "builtin"
SCHEMA_CHANGED: Final = Counter(
    "keel_worker_tool_schema_changed",
    "Tools withheld from a request because their schema differs from the one the session "
    "pinned, by source kind (plugin, provider, mcp)",
    ["source"],
)


@dataclass(frozen=True, slots=True)
class Pin:
    name: str
    source: str
    """builtin, plugin:<distribution>, provider:<name> (keel) or mcp:<name>."""
    digest: str

    def view(self) -> dict[str, str]:
        return {"name": self.name, "source": self.source, "schemaDigest": self.digest}


def pins_in(history: Sequence[Event]) -> dict[str, Pin]:
    """The pins the latest assistant.message recorded (none before the first one)."""
    for event in reversed(history):
        if event.kind != Kind.ASSISTANT_MESSAGE:
            continue
        tools = event.payload.get("tools")
        if isinstance(tools, list):
            return _parsed(tools)
    return {}


def _parsed(tools: Iterable[Any]) -> dict[str, Pin]:
    pins = {}
    for entry in tools:
        if isinstance(entry, Mapping):
            name, source, digest = entry.get("name"), entry.get("source"), entry.get("schemaDigest")
            if isinstance(name, str) and isinstance(source, str) and isinstance(digest, str):
                pins[name] = Pin(name, source, digest)
    return pins


def catalog_of(pins: Mapping[str, Pin], offered: Iterable[Pin]) -> list[dict[str, str]]:
    """What the next assistant.message records: the old pins kept, new tools pinned."""
    merged = dict(pins)
    for pin in offered:
        merged.setdefault(pin.name, pin)
    return [merged[name].view() for name in sorted(merged)]


def changed_message(name: str, pinned: Pin, now: str) -> str:
    return (
        f"tool {name!r} was not run: its schema changed since this session pinned it "
        f"({pinned.digest} -> {now}); a changed tool is not used silently. Start a new "
        "session to use the new schema."
    )
