"""No poison pill in the projector (PostgreSQL): a record whose fold raises, a state PostgreSQL
refuses, a record that is not an event or an SSE frame the broker refuses never stalls the
batch, the partition or reconcile; the session is parked, in sight, and tried again later."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
import pytest
from aiokafka.errors import MessageSizeTooLargeError
from prometheus_client import REGISTRY

from keel_stream.errors import BrokerError
from keel_stream.kafka.records import EventRecordCodec
from keel_stream.kernel import CommitRequest
from keel_stream.kernel.types import Event
from keel_stream.projections import RUN_STATUS, SSE, TRANSCRIPT, EventLike
from keel_stream.projections.transcript import TranscriptState
from keel_stream.projector.applier import Applier, BatchResult
from keel_stream.projector.events import SourceEvent, SourceRecord, decode
from keel_stream.projector.reconcile import reconcile
from keel_stream.projector.status import (
    dead_records,
    parked_sessions,
    projection_status,
    unpark,
)
from keel_stream.store import PostgresLedger
from keel_stream.store.projection_state import PostgresProjectionStore
from tests.support.cli import run_keel

TOPIC = "keel.events.v1"


class Poisoned:
    """The transcript, with a fold that raises on a payload marked poison, and a state that
    PostgreSQL refuses (a NUL character, which jsonb cannot hold) after a payload marked nul."""

    name = "transcript"

    def initial(self) -> TranscriptState:
        return TRANSCRIPT.initial()

    def apply(self, state: TranscriptState, event: EventLike) -> TranscriptState:
        if event.payload.get("poison"):
            raise ValueError(f"cannot fold seq {event.seq}")
        return TRANSCRIPT.apply(state, event)

    def apply_many(self, state: TranscriptState, events: Sequence[EventLike]) -> TranscriptState:
        for event in events:
            state = self.apply(state, event)
        return state

    def dump(self, state: TranscriptState) -> dict[str, Any]:
        dumped = TRANSCRIPT.dump(state)
        if any(e.get("text") == "nul" for e in state.entries):
            dumped["broken"] = "\u0000"
        return dumped

    def load(self, data: Mapping[str, Any]) -> TranscriptState:
        return TRANSCRIPT.load(data)


POISONED = Poisoned()


@pytest.fixture
async def store(pool: asyncpg.Pool, ledger: PostgresLedger) -> PostgresProjectionStore:
    await ledger.create_tenant("acme")
    for session in ("a", "b", "c"):
        await ledger.create_session("acme", session)
    return PostgresProjectionStore(pool)


async def say(ledger: PostgresLedger, session: str, text: str, **payload: Any) -> Event:
    request = CommitRequest(
        tenant_id="acme",
        session_id=session,
        kind="user.message",
        payload={"text": text, **payload},
    )
    seq = (await ledger.commit(request)).seq
    (event,) = await ledger.read_events("acme", session, after=seq - 1, limit=1)
    return event


def as_records(events: Sequence[Event], first_offset: int) -> list[SourceRecord]:
    return [SourceRecord(e, 0, first_offset + i) for i, e in enumerate(events)]


async def texts(store: PostgresProjectionStore, session: str) -> list[str]:
    stored = await store.read_state("transcript", "acme", session)
    return [] if stored is None else [e.get("text", "") for e in stored.state["entries"]]


def parked_metric(projection: str = "transcript") -> float:
    labels = {"projection": projection}
    return REGISTRY.get_sample_value("keel_projector_parked_total", labels) or 0.0


async def test_a_fold_that_raises_parks_its_session_and_the_rest_of_the_batch_applies(
    store: PostgresProjectionStore, ledger: PostgresLedger
) -> None:
    applier = Applier(store, [POISONED, RUN_STATUS, SSE], TOPIC)
    before = parked_metric()
    first = [
        await say(ledger, "a", "a1"),
        await say(ledger, "b", "b1"),
        await say(ledger, "b", "b2", poison=True),
        await say(ledger, "b", "b3"),
        await say(ledger, "c", "c1"),
    ]
    result = await applier.apply(as_records(first, 0))
    assert result.parked == 1
    assert await texts(store, "a") == ["a1"]
    assert await texts(store, "b") == ["b1"], "b waits at the seq before the one that raised"
    assert await texts(store, "c") == ["c1"]
    stored_b = await store.read_state("run_status", "acme", "b")
    assert stored_b is not None
    assert stored_b.last_seq == 3, "the other projections of b went on"
    assert await store.offsets("transcript", 1, TOPIC) == {0: 5}, "the partition moved on"
    assert parked_metric() == before + 1

    (parked,) = await parked_sessions(store)
    assert (parked.projection, parked.session, parked.seq) == ("transcript", "b", 2)
    assert "cannot fold seq 2" in parked.error
    assert not parked.due
    status = {(s.projection, s.generation): s.parked for s in await projection_status(store, None)}
    assert status[("transcript", 1)] == 1
    assert status[("run_status", 1)] == 0

    later = [await say(ledger, "a", "a2"), await say(ledger, "b", "b4")]
    await applier.apply(as_records(later, 5))
    assert await texts(store, "a") == ["a1", "a2"], "later batches apply"
    assert await texts(store, "b") == ["b1"], "a parked session is left alone until due"
    assert await store.offsets("transcript", 1, TOPIC) == {0: 7}


async def test_a_state_postgresql_refuses_parks_its_session_and_the_others_apply(
    store: PostgresProjectionStore, ledger: PostgresLedger
) -> None:
    applier = Applier(store, [POISONED, RUN_STATUS, SSE], TOPIC)
    batch = [
        await say(ledger, "a", "a1"),
        await say(ledger, "b", "b1"),
        await say(ledger, "b", "nul"),
        await say(ledger, "c", "c1"),
    ]
    result = await applier.apply(as_records(batch, 0))
    assert result == BatchResult(applied=3 * 4 - 2, gap_filled=0, parked=1)
    assert (await texts(store, "a"), await texts(store, "c")) == (["a1"], ["c1"])
    assert await texts(store, "b") == [], "nothing of b: its state was refused whole"
    (parked,) = await parked_sessions(store)
    assert (parked.projection, parked.session, parked.seq) == ("transcript", "b", 1)
    assert "StoreError" in parked.error
    for projection in ("transcript", "run_status", "sse"):
        assert await store.offsets(projection, 1, TOPIC) == {0: 4}


async def test_a_claim_check_is_folded_as_the_event_it_stands_for(
    store: PostgresProjectionStore, ledger: PostgresLedger
) -> None:
    applier = Applier(store, [TRANSCRIPT, RUN_STATUS, SSE], TOPIC)
    real = await say(ledger, "a", "the real text, too large for the topic")
    stand_in = EventRecordCodec.claim_check(
        "acme", "a", real.seq, real.kind, real.committed_at, {"reason": "too_large"}
    )
    record = decode(stand_in.value, 0, 0)
    assert isinstance(record, SourceRecord)
    later = await say(ledger, "a", "after it")
    await applier.apply([record, SourceRecord(later, 0, 1)])
    assert await texts(store, "a") == ["the real text, too large for the topic", "after it"]


async def test_a_record_that_is_not_an_event_is_kept_and_passed_over(
    store: PostgresProjectionStore, ledger: PostgresLedger
) -> None:
    applier = Applier(store, [TRANSCRIPT, RUN_STATUS, SSE], TOPIC)
    a1 = await say(ledger, "a", "a1")
    good = EventRecordCodec.encode("acme", "a", a1.seq, a1.kind, a1.payload, a1.committed_at)
    records = [
        decode(b"{not json", 0, 0),
        decode(b'{"tenant": "acme", "session": 5, "seq": "x"}', 0, 1),
        decode(good.value, 0, 2),
    ]
    await applier.apply(records)
    assert await texts(store, "a") == ["a1"]
    assert await dead_records(store) == 2
    assert await store.offsets("transcript", 1, TOPIC) == {0: 3}


async def test_reconcile_heals_the_other_sessions_when_one_cannot_be_applied(
    store: PostgresProjectionStore, ledger: PostgresLedger
) -> None:
    # Nothing reached the topic: every session is behind, and b's fold raises.
    await say(ledger, "a", "a1")
    await say(ledger, "b", "b1", poison=True)
    await say(ledger, "b", "b2")
    await say(ledger, "c", "c1")
    applier = Applier(store, [POISONED, RUN_STATUS, SSE], TOPIC)
    result = await reconcile(store, applier, [POISONED, RUN_STATUS, SSE], idle_s=0)
    assert result.parked == 1
    assert (await texts(store, "a"), await texts(store, "c")) == (["a1"], ["c1"])
    assert await texts(store, "b") == []
    again = await reconcile(store, applier, [POISONED, RUN_STATUS, SSE], idle_s=0)
    assert again == BatchResult(0, 0, 0), "a parked session is not looked for until it is due"

    # The fix: a fold that no longer raises, and the entry deleted to try it now.
    fixed = Applier(store, [TRANSCRIPT, RUN_STATUS, SSE], TOPIC)
    assert await unpark(store, projection="transcript") == 1
    healed = await reconcile(store, fixed, [TRANSCRIPT, RUN_STATUS, SSE], idle_s=0)
    assert healed.applied == 2
    assert await texts(store, "b") == ["b1", "b2"]
    assert await parked_sessions(store) == []


async def test_a_due_parked_session_that_applies_is_released(
    store: PostgresProjectionStore, ledger: PostgresLedger, pool: asyncpg.Pool
) -> None:
    applier = Applier(store, [POISONED, RUN_STATUS, SSE], TOPIC)
    b1 = await say(ledger, "b", "b1", poison=True)
    await applier.apply(as_records([b1], 0))
    assert len(await parked_sessions(store)) == 1
    await pool.execute("UPDATE projection_parked SET retry_at = now()")  # due now
    fixed = Applier(store, [TRANSCRIPT, RUN_STATUS, SSE], TOPIC)
    b2 = await say(ledger, "b", "b2")
    await fixed.apply(as_records([b2], 1))
    assert await texts(store, "b") == ["b1", "b2"], "the missing seq came from the ledger"
    assert await parked_sessions(store) == []


async def test_an_sse_frame_the_broker_refuses_is_left_out_and_the_rest_go(
    store: PostgresProjectionStore, ledger: PostgresLedger
) -> None:
    sent: list[int] = []

    async def sink(events: Sequence[SourceEvent]) -> None:
        if any(e.payload.get("huge") for e in events):
            # As the projector's sink raises it: translated at the Kafka seam.
            raise BrokerError("publish sse frames: too large") from MessageSizeTooLargeError()
        sent.extend(e.seq for e in events)

    before = REGISTRY.get_sample_value("keel_projector_dropped_frames_total") or 0.0
    applier = Applier(store, [TRANSCRIPT, RUN_STATUS, SSE], TOPIC, frame_sink=sink)
    batch = [await say(ledger, "a", f"a{i}", huge=(i == 2)) for i in range(1, 4)]
    await applier.apply(as_records(batch, 0))
    assert sent == [1, 3]
    assert await texts(store, "a") == ["a1", "a2", "a3"]
    dropped = REGISTRY.get_sample_value("keel_projector_dropped_frames_total") or 0.0
    assert dropped == before + 1


async def test_the_cli_lists_parked_sessions_and_unparks_them(
    store: PostgresProjectionStore, ledger: PostgresLedger, database_dsn: str
) -> None:
    applier = Applier(store, [POISONED, RUN_STATUS, SSE], TOPIC)
    await applier.apply(as_records([await say(ledger, "b", "b1", poison=True)], 0))
    env = {"KEEL_DATABASE_URL": database_dsn}
    listed = await run_keel("projections", "parked", env=env)
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if " b " in f" {line} "]
    assert "transcript" in row
    status = await run_keel("projections", "status", env=env)
    assert "parked" in status.stdout.splitlines()[0]
    other = await run_keel("projections", "unpark", "--session", "nobody", env=env)
    assert other.stdout.strip() == "unparked 0 sessions"
    unparked = await run_keel("projections", "unpark", "transcript", "--session", "b", env=env)
    assert unparked.stdout.strip() == "unparked 1 sessions"
    assert await parked_sessions(store) == []
