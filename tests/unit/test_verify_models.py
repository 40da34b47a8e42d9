"""`keel-stream verify` on the read-model side, and how it pages the ledger."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from keel_stream.kernel.types import Event
from keel_stream.projections import ALL, RUN_STATUS, SSE, TRANSCRIPT, fold
from keel_stream.projections.base import Projection
from keel_stream.store.projection_state import StoredState
from keel_stream.verify.models import compare_model
from keel_stream.verify.report import Check
from keel_stream.verify.run import chunks

KEY = ("acme", "s1")
T0 = datetime(2026, 11, 30, tzinfo=UTC)


def conversation() -> list[Event]:
    payloads: list[tuple[str, dict[str, Any]]] = [
        ("user.message", {"text": "hi"}),
        (
            "assistant.message",
            {"content": [{"type": "text", "text": "hello"}], "inputSeqs": [1]},
        ),
        ("run.finished", {"status": "done", "turns": 1, "durationMs": 5, "toolTimings": []}),
        ("user.message", {"text": "again"}),
    ]
    return [Event.trusted(*KEY, n, kind, p, T0) for n, (kind, p) in enumerate(payloads, 1)]


def stored(projection: Projection[Any], events: list[Event], upto: int) -> StoredState:
    folded = fold(projection, [e for e in events if e.seq <= upto])
    # As it comes back from the jsonb column.
    return StoredState(folded.last_seq, orjson.loads(orjson.dumps(projection.dump(folded.state))))


def test_every_model_equal_to_the_fold_at_its_seq_has_no_difference() -> None:
    events = conversation()
    for projection in ALL:
        for upto in range(len(events) + 1):
            assert compare_model(projection, KEY, stored(projection, events, upto), events) is None
        assert compare_model(projection, KEY, None, events) is None


def test_a_tampered_model_differs_and_names_its_field() -> None:
    events = conversation()
    state = stored(TRANSCRIPT, events, 4)
    state.state["entries"] = state.state["entries"][:-1]
    difference = compare_model(TRANSCRIPT, KEY, state, events)
    assert difference is not None
    assert (difference.check, difference.projection, difference.seq) == (
        Check.MODEL_DIFFERS,
        "transcript",
        4,
    )
    assert "fields: entries" in difference.detail


def test_a_model_past_the_ledger_differs() -> None:
    events = conversation()
    ahead = StoredState(9, stored(SSE, events, 4).state)
    difference = compare_model(SSE, KEY, ahead, events)
    assert difference is not None
    assert "past the ledger" in difference.detail


def test_a_model_that_is_not_an_object_differs() -> None:
    events = conversation()
    bad = StoredState(2, [1, 2])  # type: ignore[arg-type]
    difference = compare_model(RUN_STATUS, KEY, bad, events)
    assert difference is not None
    assert "not a JSON object" in difference.detail


def test_chunks_cover_every_session_once_in_key_order() -> None:
    heads = {("a", f"s{i:02d}"): 30 for i in range(10)} | {("a", "s05x"): 500, ("b", "z"): 0}
    found = list(chunks(heads, ("", ""), 100, ranged=True))
    assert [k for c in found for k in c.keys] == sorted(heads)
    after = ("", "")
    for chunk in found:
        assert chunk.after == after
        assert chunk.upto == chunk.keys[-1]
        after = chunk.upto
        if chunk.ranged:
            assert sum(heads[k] for k in chunk.keys) <= 100
        else:
            assert chunk.keys == (("a", "s05x"),)


def test_without_ranges_each_session_is_a_chunk() -> None:
    heads = {("a", "s1"): 3, ("b", "s1"): 4}
    found = list(chunks(heads, ("", ""), 100, ranged=False))
    assert [(c.keys, c.ranged) for c in found] == [((("a", "s1"),), False), ((("b", "s1"),), False)]
