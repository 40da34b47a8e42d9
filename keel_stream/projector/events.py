"""Where an event came from on the source topic, what stands in for it there, and what the
applier does about one it cannot apply (the metrics that count it, too).

A source record decodes to a DecodedEvent (the kernel's Event's fields, built without pydantic),
or, when it does not decode as one, to an Undecodable the applier keeps as a dead record and
passes over: every event is in the ledger, so gap-fill and reconcile bring in whatever such a
record should have carried. A claim check
(keel_stream.kafka.records) decodes to an event whose payload is only a stand-in; `gather`
replaces it by the event itself, read from the ledger by seq.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

import orjson
from prometheus_client import Counter, Gauge

from keel_stream.errors import KeelError
from keel_stream.kafka.errors import client_failure
from keel_stream.kafka.records import CLAIM_CHECK_FIELD, is_claim_check
from keel_stream.kernel.types import EventLike
from keel_stream.projections.base import Folded, Projection, fresh
from keel_stream.relay.refusals import refusal
from keel_stream.store.projection_parked import refused_by_store
from keel_stream.store.projection_state import Key, LedgerReader

__all__ = [
    "CLAIM_CHECKS",
    "DEAD_RECORDS",
    "DROPPED_FRAMES",
    "PARKED",
    "PARKED_SESSIONS",
    "DecodedEvent",
    "SourceEvent",
    "SourceRecord",
    "Undecodable",
    "decode",
    "describe",
    "fold_isolated",
    "frame_refusal",
    "gather",
    "isolable",
]

PARKED: Final = Counter(
    "keel_projector_parked",
    "Sessions a projection could not apply (its fold raised, or PostgreSQL refused the state), "
    "parked: the state waits at the last seq applied while the partition goes on",
    ["projection"],
)
PARKED_SESSIONS: Final = Gauge(
    "keel_projector_parked_sessions",
    "Sessions parked now in the live generation of a projection (refreshed by reconcile)",
    ["projection"],
)
DEAD_RECORDS: Final = Counter(
    "keel_projector_dead_records", "Source records that did not decode as events, passed over"
)
DROPPED_FRAMES: Final = Counter(
    "keel_projector_dropped_frames",
    "SSE frames the broker refused for their size, left out of keel.sse.v1 (readers heal from "
    "the ledger)",
)
CLAIM_CHECKS: Final = Counter(
    "keel_projector_claim_checks",
    "Claim checks met on the source topic, whose events were read from the ledger instead",
)
_MAX_ERROR: Final = 2000


class SourceEvent(EventLike, Protocol):
    """What the applier reads of an event: a kernel Event (from the ledger) or a DecodedEvent
    (off the topic)."""

    @property
    def key(self) -> tuple[str, str]: ...
    @property
    def committed_at(self) -> datetime | str: ...


class DecodedEvent:
    """An event as its record carries it, decoded without pydantic (every record of the topic
    is decoded on the live path and in a rebuild); committed_at is the record's text."""

    __slots__ = ("committed_at", "kind", "payload", "seq", "session", "tenant")

    def __init__(
        self,
        tenant: str,
        session: str,
        seq: int,
        kind: str,
        payload: dict[str, Any],
        committed_at: str,
    ) -> None:
        self.tenant = tenant
        self.session = session
        self.seq = seq
        self.kind = kind
        self.payload = payload
        self.committed_at = committed_at

    @property
    def key(self) -> tuple[str, str]:
        return (self.tenant, self.session)

    def __repr__(self) -> str:
        return f"DecodedEvent({self.tenant!r}, {self.session!r}, {self.seq}, {self.kind!r})"

    @classmethod
    def of(cls, value: bytes) -> DecodedEvent:
        """A keel.events.v1 record value (trusted: the relay wrote it); KeyError, TypeError or
        ValueError if it is not one."""
        d = orjson.loads(value)
        return cls(d["tenant"], d["session"], d["seq"], d["kind"], d["payload"], d["committedAt"])


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """An event and where it came from on the source topic."""

    event: SourceEvent
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Undecodable:
    """A source record that is not an event: where it is, its value and why it is not one."""

    partition: int
    offset: int
    value: bytes
    error: str


def _shape_error(event: DecodedEvent) -> str | None:
    if not (isinstance(event.tenant, str) and isinstance(event.session, str)):
        return "tenant and session must be strings"
    if not (isinstance(event.seq, int) and not isinstance(event.seq, bool) and event.seq >= 1):
        return "seq must be a positive integer"
    if not (isinstance(event.kind, str) and isinstance(event.payload, dict)):
        return "kind must be a string and payload an object"
    if not isinstance(event.committed_at, str):
        return "committedAt must be a string"
    return None


def decode(value: bytes, partition: int, offset: int) -> SourceRecord | Undecodable:
    """A record value of the source topic as its event, or as an Undecodable (never raises)."""
    try:
        event = DecodedEvent.of(value)
    except (ValueError, KeyError, TypeError) as exc:  # orjson's errors are ValueErrors
        return Undecodable(partition, offset, value, f"{type(exc).__name__}: {exc}")
    problem = _shape_error(event)
    if problem is not None:
        return Undecodable(partition, offset, value, problem)
    return SourceRecord(event, partition, offset)


def _in_order(last_seq: int, events: Sequence[SourceEvent]) -> bool:
    """The events are last_seq + 1, + 2, ... and none is a claim check (what a partition
    delivers, nearly always)."""
    expected = last_seq + 1
    for event in events:
        payload = event.payload
        if event.seq != expected or (CLAIM_CHECK_FIELD in payload and is_claim_check(payload)):
            return False
        expected += 1
    return True


async def gather(
    ledger: LedgerReader, last_seq: int, key: Key, events: Sequence[SourceEvent]
) -> tuple[list[SourceEvent], int]:
    """A session's events to fold after last_seq, in seq order, each once: the gaps before them
    and the events their claim checks stand for read from the ledger. Returns them and how many
    came from the ledger."""
    if _in_order(last_seq, events):
        return list(events), 0
    run: list[SourceEvent] = []
    filled = 0
    expected = last_seq + 1
    for event in sorted(events, key=lambda e: e.seq):
        if event.seq < expected:
            continue  # already applied, or a duplicate within the batch
        stand_in = is_claim_check(event.payload)
        if event.seq > expected or stand_in:
            upto = event.seq if stand_in else event.seq - 1
            missing = await ledger.ledger_range(key[0], key[1], expected - 1, upto)
            run.extend(missing)
            filled += len(missing)
            if stand_in:
                CLAIM_CHECKS.inc()
                expected = missing[-1].seq + 1 if missing else expected
                continue
        run.append(event)
        expected = event.seq + 1
    return (fresh(run, last_seq), filled) if run else ([], 0)


def isolable(exc: BaseException) -> bool:
    """True for a failure that belongs to what was applied, not to the platform: PostgreSQL
    refusing a state for what it is, or a Python error of a projection (a fold, a dump, its
    JSON). Applied again session by session, it fails for some sessions only. The database or
    the broker failing (a keel error, an OSError, a Kafka client error) never is."""
    if isinstance(exc, KeelError):
        return refused_by_store(exc)
    return isinstance(exc, Exception) and not (isinstance(exc, OSError) or client_failure(exc))


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:_MAX_ERROR]


def fold_isolated(
    projection: Projection[Any], folded: Folded[Any], run: list[SourceEvent]
) -> tuple[Folded[Any], list[SourceEvent], tuple[int, str] | None]:
    """Fold run onto folded; if the fold raises, the state up to the event that raised, the
    events applied, and that event's seq and error."""
    try:
        return Folded(run[-1].seq, projection.apply_many(folded.state, run)), run, None
    except Exception:  # noqa: BLE001 - found event by event below
        state = folded.state
        for i, event in enumerate(run):
            try:
                state = projection.apply(state, event)
            except Exception as exc:  # noqa: BLE001 - the session is parked with the error
                last = run[i - 1].seq if i else folded.last_seq
                return Folded(last, state), run[:i], (event.seq, describe(exc))
        return Folded(run[-1].seq, state), run, None


def frame_refusal(exc: BaseException) -> str | None:
    """Why the broker refused a frame, if for what it is (the Kafka seam wraps its errors)."""
    return refusal(exc) or (refusal(exc.__cause__) if exc.__cause__ is not None else None)
