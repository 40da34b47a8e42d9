"""Canonical JSON: the form in which two payloads are compared.

Key order, whitespace and the spelling of numbers (1 vs 1.0) never make two payloads differ.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

import orjson

__all__ = ["canonical_json", "payload_digest", "same_payload"]


def _normalise(value: Any) -> Any:
    kind = type(value)
    # The exact types of parsed JSON first: the ABC check below is slow, and a large payload
    # is walked on the event loop (the store prepares its commit there).
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            # orjson would write null: a payload must never change on its way into the log.
            raise ValueError(f"{value} is not a JSON number")
        return int(value) if value.is_integer() else value
    if kind is dict or isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in value.items()}
    if kind is list or isinstance(value, list | tuple):
        return [_normalise(v) for v in value]
    return value


def canonical_json(value: Any) -> bytes:
    """Serialise with sorted keys, no whitespace and integral floats written as integers.
    ValueError for NaN and the infinities, which JSON cannot hold."""
    return orjson.dumps(_normalise(value), option=orjson.OPT_SORT_KEYS)


def payload_digest(value: Any) -> str:
    """SHA-256 of the canonical form, hex: what a retry is compared by."""
    return hashlib.sha256(canonical_json(value)).hexdigest()


def same_payload(a: Any, b: Any) -> bool:
    """True when both values are the same JSON document, whatever their formatting."""
    return canonical_json(a) == canonical_json(b)
