"""Projector metrics (Prometheus): lag per source partition, events applied per projection,
batch latency.

Events applied are counted per projection by wrapping the projections the applier folds with
(`AppliedTally.wrap`): a fold counts its events as pending, and they are added to the counter
only when the batch's transaction committed (`AppliedTally.batch`), so a batch applied again
after a failure is counted once.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from typing import Any, Final, Generic, TypeVar

from prometheus_client import Counter, Gauge, Histogram

from keel_stream.projections.base import EventLike, Projection

__all__ = ["APPLIED", "BATCH_LATENCY", "LAG", "AppliedTally", "forget_lag", "set_lag"]

S = TypeVar("S")

LAG: Final = Gauge(
    "keel_projector_lag_events",
    "Records on a source partition not yet applied (high water - position)",
    ["topic", "partition"],
)
APPLIED: Final = Counter(
    "keel_projector_applied_events",
    "Events applied to a read model (gap fills from the ledger included)",
    ["projection"],
)
BATCH_LATENCY: Final = Histogram(
    "keel_projector_batch_seconds",
    "Applying one batch: its transaction and its SSE frames",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)


def set_lag(topic: str, positions: Mapping[int, int], highwaters: Mapping[int, int | None]) -> None:
    """Lag per partition from its position (the next offset to apply) and its high water
    (unknown until the consumer fetched from the partition: left as it was)."""
    for partition, position in positions.items():
        highwater = highwaters.get(partition)
        if highwater is not None:
            LAG.labels(topic, str(partition)).set(max(highwater - position, 0))


def forget_lag(topic: str, partitions: Iterable[int]) -> None:
    """Partitions no longer assigned here: their lag is another worker's to report."""
    for partition in partitions:
        with suppress(KeyError):
            LAG.remove(topic, str(partition))


class _Counted(Generic[S]):
    """A projection whose folds are tallied (pending until the batch commits)."""

    def __init__(self, inner: Projection[S], pending: Tally[str]) -> None:
        self._inner = inner
        self._pending = pending
        self.name = inner.name

    def initial(self) -> S:
        return self._inner.initial()

    def apply(self, state: S, event: EventLike) -> S:
        self._pending[self.name] += 1
        return self._inner.apply(state, event)

    def apply_many(self, state: S, events: Sequence[EventLike]) -> S:
        self._pending[self.name] += len(events)
        return self._inner.apply_many(state, events)

    def dump(self, state: S) -> dict[str, Any]:
        return self._inner.dump(state)

    def load(self, data: Mapping[str, Any]) -> S:
        return self._inner.load(data)


class AppliedTally:
    """Counts the events each projection applied, batch by committed batch."""

    def __init__(self) -> None:
        self._pending: Tally[str] = Tally()

    def wrap(self, projections: Iterable[Projection[Any]]) -> tuple[Projection[Any], ...]:
        return tuple(_Counted(p, self._pending) for p in projections)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Around one transaction of the applier (batches never overlap: the host's lock)."""
        self._pending.clear()
        try:
            yield
        except BaseException:
            self._pending.clear()
            raise
        for projection, events in self._pending.items():
            APPLIED.labels(projection).inc(events)
        self._pending.clear()
