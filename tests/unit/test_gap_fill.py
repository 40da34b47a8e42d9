"""Gap-fill on the memory stores: events that arrive past a gap are folded only after the missing
seqs, read from the ledger; duplicates and redeliveries change nothing; a batch's states and its
source offsets are committed together, or neither is."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
import pytest

from keel_stream.kernel import CommitRequest, RunStatus
from keel_stream.kernel.types import Event
from keel_stream.projections import ALL, EventLike, Folded, fold
from keel_stream.projector.applier import Applier, BatchResult, advance
from keel_stream.projector.events import SourceEvent, SourceRecord
from keel_stream.store import MemoryStore, Settlement
from keel_stream.store.memory_streams import MemoryProjectionStore
from keel_stream.store.projection_state import APPLIED, LedgerReader, StoredState

TOPIC = "keel.events.v1"
Seqs = tuple[int, ...]


class Recording:
    """A fold that records the seqs it applied, in order: gaps, repeats and reordering show."""

    def __init__(self, name: str) -> None:
        self.name = name

    def initial(self) -> Seqs:
        return ()

    def apply(self, state: Seqs, event: EventLike) -> Seqs:
        return (*state, event.seq)

    def apply_many(self, state: Seqs, events: Sequence[EventLike]) -> Seqs:
        return (*state, *(e.seq for e in events))

    def dump(self, state: Seqs) -> dict[str, Any]:
        return {"seqs": list(state)}

    def load(self, data: Mapping[str, Any]) -> Seqs:
        return tuple(data["seqs"])


SEQS = Recording("seqs")


class CountingReader:
    """A LedgerReader that remembers what it was asked for."""

    def __init__(self, inner: LedgerReader) -> None:
        self.inner = inner
        self.calls: list[tuple[int, int]] = []

    async def ledger_range(
        self, tenant: str, session: str, after: int, upto: int = 2**62
    ) -> list[Event]:
        self.calls.append((after, upto))
        return await self.inner.ledger_range(tenant, session, after, upto)


def request(session: str, kind: str, payload: dict[str, Any], **options: Any) -> CommitRequest:
    return CommitRequest(
        tenant_id="acme", session_id=session, kind=kind, payload=payload, **options
    )


async def ledger_with(**sessions: int) -> MemoryStore:
    """Tenant acme, and each session with that many user messages."""
    ledger = MemoryStore()
    await ledger.create_tenant("acme")
    for session, count in sessions.items():
        await ledger.create_session("acme", session)
        for i in range(count):
            await ledger.commit(request(session, "user.message", {"text": f"{session} {i}"}))
    return ledger


async def log(ledger: MemoryStore, session: str) -> list[Event]:
    return await ledger.read_events("acme", session, limit=1000)


def records(events: Sequence[Event], first_offset: int, partition: int = 0) -> list[SourceRecord]:
    """The events as consecutive records of one partition."""
    return [SourceRecord(e, partition, first_offset + i) for i, e in enumerate(events)]


async def seqs_stored(store: MemoryProjectionStore, session: str, name: str = "seqs") -> Seqs:
    stored = await store.read_state(name, "acme", session)
    assert stored is not None, f"{name} has no state for {session}"
    assert stored.last_seq == (stored.state["seqs"] or [0])[-1]
    return tuple(stored.state["seqs"])


async def test_each_gap_is_filled_with_exactly_the_missing_seqs_before_the_fold_goes_on() -> None:
    ledger = await ledger_with(s1=6)
    e = {event.seq: event for event in await log(ledger, "s1")}
    reader = CountingReader(MemoryProjectionStore(ledger))
    folded = Folded(1, (1,))
    advanced, run, filled = await advance(reader, SEQS, folded, ("acme", "s1"), [e[6], e[3]])
    assert reader.calls == [(1, 2), (3, 5)], "the ledger is read for the missing seqs only"
    assert [event.seq for event in run] == [2, 3, 4, 5, 6]
    assert filled == 3
    assert advanced == Folded(6, (1, 2, 3, 4, 5, 6))


async def test_events_at_or_below_the_applied_seq_are_no_ops_that_read_no_ledger() -> None:
    ledger = await ledger_with(s1=4)
    reader = CountingReader(MemoryProjectionStore(ledger))
    folded = Folded(4, (1, 2, 3, 4))
    again = await advance(reader, SEQS, folded, ("acme", "s1"), (await log(ledger, "s1"))[1:])
    assert again == (folded, [], 0)
    assert reader.calls == []


async def test_duplicates_within_a_batch_are_applied_once_in_seq_order() -> None:
    ledger = await ledger_with(s1=3)
    e1, e2, e3 = await log(ledger, "s1")
    reader = CountingReader(MemoryProjectionStore(ledger))
    initial = Folded(0, SEQS.initial())
    advanced, run, filled = await advance(
        reader, SEQS, initial, ("acme", "s1"), [e2, e1, e3, e2, e1, e3]
    )
    assert (advanced, [event.seq for event in run], filled) == (Folded(3, (1, 2, 3)), [1, 2, 3], 0)
    assert reader.calls == []


async def test_a_session_first_seen_past_seq_1_is_filled_from_the_start() -> None:
    ledger = await ledger_with(s1=4)
    store = MemoryProjectionStore(ledger, live=["seqs"])
    applier = Applier(store, [SEQS], TOPIC)
    result = await applier.apply(records((await log(ledger, "s1"))[2:], first_offset=0))
    assert result == BatchResult(applied=4, gap_filled=2)
    assert await seqs_stored(store, "s1") == (1, 2, 3, 4)


async def test_a_batch_past_a_gap_is_stored_filled_with_the_offsets_it_came_with() -> None:
    ledger = await ledger_with(s1=6, s2=3)
    store = MemoryProjectionStore(ledger, live=["seqs"])
    applier = Applier(store, [SEQS], TOPIC)
    s1, s2 = await log(ledger, "s1"), await log(ledger, "s2")
    await applier.apply(records(s1[:2], first_offset=0) + records(s2[:1], 0, partition=1))
    # s1's seqs 3 and 4 never reached the topic; s2's seq 2 neither.
    batch = records(s1[4:], first_offset=2) + records(s2[2:], 1, partition=1)
    assert await applier.apply(batch) == BatchResult(applied=6, gap_filled=3)
    assert await seqs_stored(store, "s1") == (1, 2, 3, 4, 5, 6)
    assert await seqs_stored(store, "s2") == (1, 2, 3)
    assert await store.offsets("seqs", 1, TOPIC) == {0: 4, 1: 2}


async def test_a_redelivered_batch_changes_nothing_and_tells_no_reader() -> None:
    ledger = await ledger_with(s1=3)
    store = MemoryProjectionStore(ledger, live=["seqs"])
    notices: list[str] = []
    await store.notifications(notices.append).start()
    applier = Applier(store, [SEQS], TOPIC)
    batch = records(await log(ledger, "s1"), first_offset=0)
    assert await applier.apply(batch) == BatchResult(applied=3, gap_filled=0)
    assert await applier.apply(batch) == BatchResult(applied=0, gap_filled=0)
    assert await seqs_stored(store, "s1") == (1, 2, 3)
    assert await store.offsets("seqs", 1, TOPIC) == {0: 3}
    assert notices == [APPLIED], "one notice, for the batch that changed the models"


async def test_stored_offsets_never_move_back() -> None:
    ledger = await ledger_with(s1=3)
    store = MemoryProjectionStore(ledger, live=["seqs"])
    applier = Applier(store, [SEQS], TOPIC)
    events = await log(ledger, "s1")
    await applier.apply(records(events, first_offset=10))
    await applier.apply(records(events[:2], first_offset=3))  # an older delivery, again
    assert await store.offsets("seqs", 1, TOPIC) == {0: 13}


async def test_states_and_offsets_are_committed_together_or_not_at_all() -> None:
    ledger = await ledger_with(s1=3)
    store = MemoryProjectionStore(ledger, live=["seqs", "frames"])
    sent: list[int] = []
    broker_up = False

    async def frame_sink(events: Sequence[SourceEvent]) -> None:
        if not broker_up:
            raise ConnectionError("broker down")
        sent.extend(e.seq for e in events)

    projections = [SEQS, Recording("frames")]
    applier = Applier(store, projections, TOPIC, frame_sink=frame_sink, frames_of="frames")
    batch = records(await log(ledger, "s1"), first_offset=0)
    with pytest.raises(ConnectionError):
        await applier.apply(batch)
    # "seqs" was written before the frames failed: rolled back with the rest.
    for name in ("seqs", "frames"):
        assert await store.read_state(name, "acme", "s1") is None
        assert await store.offsets(name, 1, TOPIC) == {}
    broker_up = True
    assert await applier.apply(batch) == BatchResult(applied=6, gap_filled=0)
    assert sent == [1, 2, 3]
    for name in ("seqs", "frames"):
        assert await seqs_stored(store, "s1", name) == (1, 2, 3)
        assert await store.offsets(name, 1, TOPIC) == {0: 3}


async def test_a_state_never_moves_backwards_whoever_writes_it() -> None:
    ledger = await ledger_with(s1=5)
    store = MemoryProjectionStore(ledger, live=["seqs"])
    await Applier(store, [SEQS], TOPIC).apply(records(await log(ledger, "s1"), first_offset=0))
    async with store.transaction() as tx:  # a slower writer, with an older state
        await tx.write_states("seqs", 1, {("acme", "s1"): StoredState(3, {"seqs": [1, 2, 3]})})
    assert await seqs_stored(store, "s1") == (1, 2, 3, 4, 5)


async def converse(ledger: MemoryStore, session: str, turns: int) -> None:
    """Turns of a user message answered by an attempt that finishes."""
    runs = ledger.runs("worker", 30)
    for turn in range(turns):
        said = await ledger.commit(request(session, "user.message", {"text": f"q{turn}"}))
        claim = await runs.claim()
        assert claim is not None
        assert claim.session == session
        content = [{"type": "text", "text": f"a{turn}"}]
        answer = {"content": content, "inputSeqs": [said.seq], "stopReason": "end_turn"}
        lease = claim.lease
        await ledger.commit(
            request(session, "assistant.message", answer, key=f"g{turn}", lease=lease)
        )
        summary = {"status": "done", "turns": 1, "durationMs": 5}
        done = await ledger.commit(request(session, "run.finished", summary, lease=lease))
        await runs.settle(claim, Settlement(RunStatus.DONE, done.seq, done.seq, fresh_budget=True))


async def test_models_equal_the_ledger_fold_whatever_the_topic_drops_or_repeats() -> None:
    ledger = MemoryStore()
    await ledger.create_tenant("acme")
    sessions = ["s1", "s2", "s3"]
    for session in sessions:
        await ledger.create_session("acme", session)
        await converse(ledger, session, turns=5)
    rng = random.Random(7)
    topic: list[Event] = []
    for session in sessions:
        events = await log(ledger, session)
        # Some events never reach the topic (not a session's last: that is the reconcile's
        # business), some twice.
        kept = [e for e in events[:-1] if rng.random() > 0.3] + events[-1:]
        topic += kept + rng.sample(kept, k=4)
    rng.shuffle(topic)  # sessions interleave, and each one's events come in any order
    store = MemoryProjectionStore(ledger)
    applier = Applier(store, ALL, TOPIC)
    delivered = [SourceRecord(e, 0, offset) for offset, e in enumerate(topic)]
    filled = 0
    for start in range(0, len(delivered), 7):
        filled += (await applier.apply(delivered[start : start + 7])).gap_filled
    assert filled > 0, "some events were filled from the ledger"
    for projection in ALL:
        for session in sessions:
            stored = await store.read_state(projection.name, "acme", session)
            expected = fold(projection, await log(ledger, session))
            assert stored is not None
            assert stored.last_seq == expected.last_seq == 15
            assert stored.state == orjson.loads(orjson.dumps(projection.dump(expected.state)))
    assert await store.offsets("transcript", 1, TOPIC) == {0: len(topic)}
