"""The largest event the ledger accepts.

The limit is on the payload as it is stored and published: its JSON as the PostgreSQL adapter
writes it and the relay puts it on keel.events.v1 (orjson, keys as given). It is chosen so that
an accepted event always fits, with its envelope, in one record of every topic (the catalog's
`max.message.bytes`, keel_stream.topics.catalog) and in its SSE frame, with room to spare; a
unit test (tests/unit/test_event_size.py) holds the two numbers to that.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import orjson

from keel_stream.errors import PayloadTooLarge

__all__ = ["MAX_EVENT_BYTES", "check_event_size", "event_size"]

MAX_EVENT_BYTES: Final = 512 * 1024
"""Serialized payload bytes an event may have: 512 KiB."""


def event_size(payload: Mapping[str, Any]) -> int:
    """The payload's size in bytes, serialized as it is stored and published."""
    return len(orjson.dumps(payload, option=orjson.OPT_NON_STR_KEYS))


def check_event_size(payload: Mapping[str, Any], limit: int = MAX_EVENT_BYTES) -> int:
    """The payload's size; PayloadTooLarge when it is over the limit."""
    size = event_size(payload)
    if size > limit:
        raise PayloadTooLarge(
            f"the event's payload is {size} bytes serialized; the ledger accepts at most {limit}"
        )
    return size
