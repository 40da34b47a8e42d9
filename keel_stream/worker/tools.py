"""Built-in tools. Tool side effects are at least once: a takeover may run a call again, while
the ledger keeps exactly one tool.result per toolCallId."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from keel_stream.worker.providers.base import ToolSpec

__all__ = ["TOOLS", "Tool", "ToolFailed", "run_tool"]


class ToolFailed(Exception):
    """The tool ran and failed; the result is recorded with isError."""


@dataclass(frozen=True, slots=True)
class Tool:
    spec: ToolSpec
    run: Callable[[Mapping[str, Any]], Awaitable[str]]


async def _echo(arguments: Mapping[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True)


async def _note(arguments: Mapping[str, Any]) -> str:
    """Append a line to the notes file (an observable side effect), after an optional pause."""
    await asyncio.sleep(float(arguments.get("sleep_ms", 0)) / 1000)
    target = os.environ.get("KEEL_TOOL_NOTES_FILE")
    if not target:
        raise ToolFailed("KEEL_TOOL_NOTES_FILE is not set")
    line = str(arguments.get("text", ""))
    await asyncio.to_thread(_append, Path(target), line + "\n")
    return f"noted: {line}"


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as notes:
        notes.write(text)


async def _sleep(arguments: Mapping[str, Any]) -> str:
    seconds = min(float(arguments.get("seconds", 1)), 300.0)
    await asyncio.sleep(seconds)
    return f"slept {seconds}s"


TOOLS: Final = {
    tool.spec.name: tool
    for tool in (
        Tool(
            ToolSpec("echo", "Returns its arguments as JSON.", {"type": "object"}),
            _echo,
        ),
        Tool(
            ToolSpec(
                "note",
                "Appends a line of text to the notes file.",
                {
                    "type": "object",
                    "properties": {"text": {"type": "string"}, "sleep_ms": {"type": "integer"}},
                    "required": ["text"],
                },
            ),
            _note,
        ),
        Tool(
            ToolSpec(
                "sleep",
                "Waits for a number of seconds (at most 300).",
                {"type": "object", "properties": {"seconds": {"type": "number"}}},
            ),
            _sleep,
        ),
    )
}


async def run_tool(name: str, arguments: Any) -> tuple[str, bool]:
    """Run a tool; (text, is_error). An unknown tool, bad arguments or any failure of the tool
    is an error result the model can see, never a crash of the attempt."""
    tool = TOOLS.get(name)
    if tool is None:
        return f"unknown tool {name!r}", True
    if not isinstance(arguments, Mapping):
        return "tool arguments must be a JSON object", True
    try:
        return await tool.run(arguments), False
    except ToolFailed as exc:
        return str(exc), True
    except Exception as exc:  # noqa: BLE001 - a tool's own failure is its result
        return f"{name} failed: {exc.__class__.__name__}: {exc}", True
