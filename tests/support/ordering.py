"""Checks on what arrived on keel.events.v1."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

from tests.support.kafka import Received


def first_arrivals(received: list[Received]) -> dict[tuple[str, str], list[int]]:
    """Per session, the seqs in arrival order after de-duplication (first arrival kept)."""
    seen: set[tuple[str, str, int]] = set()
    per_session: dict[tuple[str, str], list[int]] = defaultdict(list)
    for r in received:
        key = (r.event.tenant, r.event.session, r.event.seq)
        if key not in seen:
            seen.add(key)
            per_session[(r.event.tenant, r.event.session)].append(r.event.seq)
    return dict(per_session)


def has_all(expected: dict[tuple[str, str], int]) -> Callable[[list[Received]], bool]:
    """A done() predicate for collect(): every session's seqs 1..n have arrived."""

    def done(received: list[Received]) -> bool:
        got: dict[tuple[str, str], set[int]] = defaultdict(set)
        for r in received:
            got[(r.event.tenant, r.event.session)].add(r.event.seq)
        return all(len(got[k]) >= n and max(got[k]) >= n for k, n in expected.items())

    return done


def assert_each_once_in_order(
    received: list[Received], expected: dict[tuple[str, str], int]
) -> None:
    """After de-duplication, each session holds exactly 1..n, first arrivals in seq order."""
    arrivals = first_arrivals(received)
    assert set(arrivals) == set(expected)
    for session, n in expected.items():
        assert arrivals[session] == list(range(1, n + 1)), session
