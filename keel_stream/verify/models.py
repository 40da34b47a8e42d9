"""A stored read model against the fold of the ledger (pure: no I/O).

A model is compared at its own position: it must equal the projection's fold of the session's
ledger events up to the seq it says it has applied. Whether that position is far enough (the
ledger head when the verification started) is the caller's question.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from keel_stream.projections.base import EventLike, Projection, fold
from keel_stream.store.projection_state import StoredState
from keel_stream.store.verify_reads import Key
from keel_stream.verify.report import Check, Difference

__all__ = ["compare_model", "stored_seq"]


def stored_seq(stored: StoredState | None) -> int:
    return 0 if stored is None else stored.last_seq


def _json(value: Any) -> Any:
    """The value as it reads back from a jsonb column (tuples become lists, and so on)."""
    return orjson.loads(orjson.dumps(value))


def compare_model(
    projection: Projection[Any], key: Key, stored: StoredState | None, events: Sequence[EventLike]
) -> Difference | None:
    """None when the stored model equals the fold of `events` up to its seq, else the
    difference. `events` are the session's ledger events from seq 1, at least up to the model's
    seq when the ledger has that many."""
    last = stored_seq(stored)
    ledger_end = events[-1].seq if events else 0
    if last > ledger_end:
        detail = f"the stored model is at seq {last}, past the ledger's last seq {ledger_end}"
        return Difference(Check.MODEL_DIFFERS, *key, last, detail, projection.name)
    expected = _json(projection.dump(fold(projection, [e for e in events if e.seq <= last]).state))
    actual = stored.state if stored is not None else expected
    if actual == expected:
        return None
    detail = (
        f"the stored model differs from the ledger fold at seq {last} ({_fields(actual, expected)})"
    )
    return Difference(Check.MODEL_DIFFERS, *key, last, detail, projection.name)


def _fields(actual: Any, expected: dict[str, Any]) -> str:
    if not isinstance(actual, dict):
        return "not a JSON object"
    names = sorted(n for n in set(actual) | set(expected) if actual.get(n) != expected.get(n))
    return f"fields: {', '.join(names)}"
