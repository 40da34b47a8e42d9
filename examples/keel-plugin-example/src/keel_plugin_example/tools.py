"""The ``word_count`` tool: how many words (whitespace-separated) ``text`` has."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from keel_stream.plugins import PluginTool


async def _count(arguments: Mapping[str, Any]) -> str:
    words = str(arguments["text"]).split()
    return f"{len(words)} words"


word_count = PluginTool(
    name="word_count",
    description="Counts the words of a text.",
    parameters={
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": 100_000}},
        "required": ["text"],
        "additionalProperties": False,
    },
    run=_count,
)
