"""Bounding what the worker commits: a tool's output or a model's text that would make an event
larger than the ledger accepts (keel_stream.kernel.limits) is cut, visibly, instead of failing
the commit on every attempt (a deterministic failure retried forever)."""

from __future__ import annotations

from typing import Final

import orjson

from keel_stream.kernel.limits import MAX_EVENT_BYTES

__all__ = ["TEXT_MAX_BYTES", "bounded_text"]

TEXT_MAX_BYTES: Final = MAX_EVENT_BYTES // 2
"""Serialized bytes one tool output or answer text may take: half an event, leaving the rest of
the payload (ids, other blocks, usage) room."""


def bounded_text(text: str, limit: int = TEXT_MAX_BYTES) -> str:
    """`text`, or its start with a note of how much was cut, so that its JSON (escapes included)
    takes at most `limit` bytes."""
    size = len(orjson.dumps(text))
    if size <= limit:
        return text
    note = f"\n[output cut: {size} bytes as JSON; the ledger keeps at most {limit}]"
    budget = limit - len(orjson.dumps(note))
    keep = len(text) * budget // size
    while keep > 0 and len(orjson.dumps(text[:keep])) > budget:
        keep = keep * 9 // 10
    return text[:keep] + note
