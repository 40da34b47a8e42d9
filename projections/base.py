"""What every projection is: a pure fold over one session's events, in seq order.

`apply(state, event) -> state` never does I/O and never looks at the clock, so a projection can
be tested with no broker and rebuilt from any replay. Seq bookkeeping is shared (`step`): an
event at or below the applied seq is a no-op (a duplicate or redelivery), and an event past a
gap raises SeqGap so the host fetches the missing seqs from the ledger first.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from keel_stream.kernel.types import EventLike

__all__ = ["EventLike", "Folded", "Projection", "SeqGap", "fold", "fresh", "step"]

S = TypeVar("S")


E = TypeVar("E", bound=EventLike)


class Projection(Protocol[S]):
    """A named pure fold with a JSON form for its state."""

    name: str

    def initial(self) -> S: ...
    def apply(self, state: S, event: EventLike) -> S: ...
    def apply_many(self, state: S, events: Sequence[EventLike]) -> S:
        """apply() over consecutive events; implementations avoid the per-event copies."""
        ...

    def dump(self, state: S) -> dict[str, Any]: ...
    def load(self, data: Mapping[str, Any]) -> S: ...


class SeqGap(Exception):
    """The next event is past a gap: seqs first..last_missing must be applied first."""

    def __init__(self, first: int, last_missing: int) -> None:
        super().__init__(f"seqs {first}..{last_missing} are missing")
        self.first = first
        self.last_missing = last_missing


@dataclass(frozen=True, slots=True)
class Folded(Generic[S]):
    """A projection's state for one session and the last seq it has applied."""

    last_seq: int
    state: S


def step(projection: Projection[S], folded: Folded[S], event: EventLike) -> Folded[S]:
    """Apply one event idempotently: duplicates are no-ops, gaps raise SeqGap."""
    if event.seq <= folded.last_seq:
        return folded
    if event.seq != folded.last_seq + 1:
        raise SeqGap(folded.last_seq + 1, event.seq - 1)
    return Folded(event.seq, projection.apply(folded.state, event))


def fresh(events: Iterable[E], last_seq: int) -> list[E]:
    """The events past last_seq, in seq order, each seq once; SeqGap if one is missing."""
    run: list[E] = []
    expected = last_seq + 1
    for event in sorted(events, key=lambda e: e.seq):
        if event.seq < expected:
            continue
        if event.seq > expected:
            raise SeqGap(expected, event.seq - 1)
        run.append(event)
        expected += 1
    return run


def fold(
    projection: Projection[S], events: Iterable[EventLike], start: Folded[S] | None = None
) -> Folded[S]:
    """Fold events (in any order with duplicates, as long as no seq is missing) from start."""
    folded = start if start is not None else Folded(0, projection.initial())
    run = fresh(events, folded.last_seq)
    if not run:
        return folded
    return Folded(run[-1].seq, projection.apply_many(folded.state, run))
