"""The transcript stored as rows reads back as the document the fold makes, however the log is
cut into batches, whichever way the batches are written (live: a head and the rows; rebuild:
pending in memory between writes) and whatever the stored form was before (a document)."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keel_stream.projections import TRANSCRIPT, fold
from keel_stream.projections.transcript import Entry, calls_of
from keel_stream.projections.transcript_rows import (
    Pending,
    assemble,
    in_memory,
    needed_calls,
    needs_context,
    pending_of,
    prepared,
    to_rows,
)
from tests.unit.test_projections import Ev, assistant, session_logs, user


def as_json(value: Any) -> Any:
    return orjson.loads(orjson.dumps(value))


class RowTable:
    """One session's head and entry rows, as PostgreSQL keeps them."""

    def __init__(self, head: dict[str, Any] | None = None) -> None:
        self.head = head
        self.rows: dict[int, tuple[int | None, Entry]] = {}

    def context(self) -> list[tuple[int, int]]:
        placed = [(p, s) for s, (p, _) in self.rows.items() if p is not None]
        return [(s, p) for p, s in sorted(placed)]

    def calls(self, wanted: set[str]) -> dict[str, str]:
        stored = calls_of(e for _, (_, e) in sorted(self.rows.items()))
        return {c: stored[c] for c in wanted if c in stored}

    def write(self, pending: Pending, folded: Any) -> Pending:
        rows, after = to_rows(pending, as_json(TRANSCRIPT.dump(folded)))
        for seq, position, entry in rows.entries:
            self.rows[seq] = (position, entry)
        for seq, position in rows.moved.items():
            self.rows[seq] = (position, self.rows[seq][1])
        self.head = as_json(rows.head)
        return after

    def apply(self, batch: list[Ev]) -> None:
        """A live batch: the head and what the batch needs read, folded, written."""
        context = self.context() if needs_context(batch) else None
        pending = pending_of(self.head, calls=self.calls(needed_calls(batch)), context=context)
        self.write(pending, TRANSCRIPT.apply_many(pending.state, batch))

    def read(self) -> dict[str, Any]:
        assert self.head is not None
        return assemble(self.head, [row for _, row in sorted(self.rows.items())])


def batches(log: list[Ev], cuts: set[int]) -> list[list[Ev]]:
    bounds = [0, *sorted(cuts), len(log)]
    return [log[a:b] for a, b in pairwise(bounds) if b > a]


def expected(log: list[Ev]) -> Any:
    return as_json(TRANSCRIPT.dump(fold(TRANSCRIPT, log).state))


@settings(max_examples=200, deadline=None)
@given(log=session_logs(), cuts=st.sets(st.integers(1, 40), max_size=8))
def test_live_batches_read_back_as_the_fold(log: list[Ev], cuts: set[int]) -> None:
    table = RowTable()
    for batch in batches(log, {c for c in cuts if c < len(log)}):
        table.apply(batch)
    assert table.read() == expected(log)


@settings(max_examples=200, deadline=None)
@given(log=session_logs(), cuts=st.sets(st.integers(1, 40), max_size=8), data=st.data())
def test_a_rebuild_writing_now_and_then_reads_back_as_the_fold(
    log: list[Ev], cuts: set[int], data: st.DataObject
) -> None:
    table = RowTable()
    pending = in_memory()
    for batch in batches(log, {c for c in cuts if c < len(log)}):
        pending = prepared(pending, batch)
        pending = replace(pending, state=TRANSCRIPT.apply_many(pending.state, batch))
        if data.draw(st.booleans()):
            pending = table.write(pending, pending.state)
    table.write(pending, pending.state)
    assert table.read() == expected(log)


@settings(max_examples=100, deadline=None)
@given(log=session_logs(), cut=st.integers(0, 40))
def test_a_stored_document_is_written_as_rows_by_the_next_batch(log: list[Ev], cut: int) -> None:
    table = RowTable(expected(log[:cut]))
    assert table.read() == expected(log[:cut])
    table.apply(log[cut:])
    if cut < len(log):
        assert table.read() == expected(log)


def test_a_compaction_drops_the_stored_context_before_its_first_kept_seq() -> None:
    table = RowTable()
    table.apply([user(1), assistant(2, [1]), user(3), assistant(4, [3])])
    table.apply([Ev(5, "compaction", {"summary": "s", "firstKeptSeq": 3})])
    assert [(s, p) for s, (p, _) in sorted(table.rows.items())] == [
        (1, None), (2, None), (3, 2), (4, 3), (5, 1),
    ]  # fmt: skip
    assert table.head == {"waiting": [], "contextEnd": 4}


def test_a_waiting_input_enters_the_context_where_its_answer_places_it() -> None:
    table = RowTable()
    table.apply([user(1), assistant(2, [1], "tool_use", calls=1), user(3)])
    assert table.rows[3][0] is None
    result = Ev(4, "tool.result", {"toolCallId": "c2-0"})
    table.apply([result, assistant(5, [3])])
    assert table.rows[4][1]["toolName"] == "echo", "paired with a call stored before"
    assert [table.rows[s][0] for s in (1, 2, 4, 3, 5)] == [0, 1, 2, 3, 4]
    assert table.head == {"waiting": [], "contextEnd": 5}


@pytest.mark.parametrize("kind", ["run.finished", "external.event"])
def test_events_outside_the_context_have_no_position(kind: str) -> None:
    table = RowTable()
    table.apply([Ev(1, kind, {})])
    assert table.rows.get(1, (None, {}))[0] is None
