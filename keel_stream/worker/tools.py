"""Built-in tools. Tool side effects are at least once: a takeover may run a call again, while
the ledger keeps exactly one tool.result per toolCallId.

A call's arguments are checked against the tool's schema before it runs (bounds included: the
tool is not run with NaN, a negative or an oversized wait); every call is bounded in time
(``within``). A tool's blocking work runs in a thread, off the event loop (note's file write).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from keel_stream.plugins.tool_arguments import ArgumentsCheck
from keel_stream.worker.providers.base import ToolSpec

__all__ = ["SLEEP_MAX_S", "TOOLS", "BuiltinContext", "Tool", "ToolFailed", "run_tool", "within"]

SLEEP_MAX_S: Final = 300
NOTE_PAUSE_MAX_MS: Final = 60_000


class ToolFailed(Exception):
    """The tool ran and failed; the result is recorded with isError."""


@dataclass(frozen=True, slots=True)
class BuiltinContext:
    """What the built-in tools may use, given by the worker's command from its settings."""

    notes_file: Path | None = None
    """KEEL_TOOL_NOTES_FILE: where `note` appends its lines; None: `note` fails."""


@dataclass(frozen=True, slots=True)
class Tool:
    spec: ToolSpec
    run: Callable[[Mapping[str, Any], BuiltinContext], Awaitable[str]]
    check: ArgumentsCheck = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "check", ArgumentsCheck(self.spec.parameters))


async def _echo(arguments: Mapping[str, Any], _context: BuiltinContext) -> str:
    return json.dumps(arguments, sort_keys=True)


async def _note(arguments: Mapping[str, Any], context: BuiltinContext) -> str:
    """Append a line to the notes file (an observable side effect), after an optional pause."""
    await asyncio.sleep(float(arguments.get("sleep_ms", 0)) / 1000)
    if context.notes_file is None:
        raise ToolFailed("KEEL_TOOL_NOTES_FILE is not set")
    line = str(arguments.get("text", ""))
    await asyncio.to_thread(_append, context.notes_file, line + "\n")
    return f"noted: {line}"


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as notes:
        notes.write(text)


async def _sleep(arguments: Mapping[str, Any], _context: BuiltinContext) -> str:
    seconds = min(max(float(arguments.get("seconds", 1)), 0.0), SLEEP_MAX_S)
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
                    "properties": {
                        "text": {"type": "string"},
                        "sleep_ms": {"type": "integer", "minimum": 0, "maximum": NOTE_PAUSE_MAX_MS},
                    },
                    "required": ["text"],
                },
            ),
            _note,
        ),
        Tool(
            ToolSpec(
                "sleep",
                "Waits for a number of seconds (at most 300).",
                {
                    "type": "object",
                    "properties": {
                        "seconds": {"type": "number", "minimum": 0, "maximum": SLEEP_MAX_S}
                    },
                },
            ),
            _sleep,
        ),
    )
}


async def run_tool(
    name: str, arguments: Any, context: BuiltinContext | None = None
) -> tuple[str, bool]:
    """Run a built-in tool; (text, is_error). An unknown tool, arguments its schema refuses or
    any failure of the tool is an error result the model can see, never a crash of the attempt.
    Unbounded in time: callers bound it with ``within``."""
    tool = TOOLS.get(name)
    if tool is None:
        return f"unknown tool {name!r}", True
    problem = tool.check.problem(name, arguments)
    if problem is not None:
        return problem, True
    try:
        return await tool.run(arguments, context or BuiltinContext()), False
    except ToolFailed as exc:
        return str(exc), True
    except Exception as exc:  # noqa: BLE001 - a tool's own failure is its result
        return f"{name} failed: {exc.__class__.__name__}: {exc}", True


async def within(
    name: str, call: Awaitable[tuple[str, bool]], timeout_s: float
) -> tuple[str, bool]:
    """A call's result, or an error result once it took ``timeout_s`` (the call is cancelled:
    a tool's thread, if any, finishes on its own, the event loop does not wait for it)."""
    bound = asyncio.timeout(timeout_s)
    try:
        async with bound:
            return await call
    except TimeoutError:
        if not bound.expired():
            raise
        return f"tool {name!r} timed out after {timeout_s:g} s", True
