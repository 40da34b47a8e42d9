"""The pipelined relay over the memory outbox: the next batch is fetched (past the rows in flight)
and handed over while earlier ones await their acknowledgements; batches are settled in the
order they were handed over, rows deleted only after their batch and every earlier one were
acknowledged; after a failure nothing later counts, and every event still reaches the topic
once, in order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence

import pytest
from aiokafka import errors as kafka
from aiokafka.partitioner import DefaultPartitioner
from prometheus_client import REGISTRY

from keel_stream.kafka.batching import Partitioner
from keel_stream.kafka.records import record_key
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.relay.publisher import Publisher, PublishResult, acknowledged
from keel_stream.relay.relay import Relay, RelayConfig
from keel_stream.relay.retry import relay_retry
from keel_stream.relay.skip import PublishedTail, tail_depth
from keel_stream.store.memory_outbox import MemoryOutbox
from keel_stream.store.outbox import (
    Backlog,
    OutboxRow,
    PipelinedShard,
    RepublishReport,
    Shard,
    ShardConnection,
)
from tests.support.wait import wait_until
from tests.unit.test_relay_acks import ACKED, outbox_with

Record = tuple[str, int]
"""(session, seq) of tenant acme"""
Log = list[tuple[str, int | tuple[int, ...]]]
"""("acked", batch number) and ("deleted", outbox ids), in the order they happened"""


def records(rows: Sequence[OutboxRow]) -> list[Record]:
    return [(r.session, r.seq) for r in rows]


class LoggedShard:
    """A memory shard connection that fetches past given rows (as PostgreSQL does, from the
    oldest), and logs each delete."""

    def __init__(self, inner: ShardConnection, log: Log) -> None:
        self._inner = inner
        self._log = log

    async def try_lead(self) -> bool:
        return await self._inner.try_lead()

    async def fetch(self, limit: int) -> list[OutboxRow]:
        return await self._inner.fetch(limit)

    async def fetch_excluding(
        self, limit: int, excluding: Sequence[int], deleting: Sequence[int] = ()
    ) -> list[OutboxRow]:
        assert set(deleting) <= set(excluding), "rows deleted on the way are passed over too"
        if deleting:
            await self.acknowledge(deleting)
        skip = set(excluding)
        rows = await self._inner.fetch(limit + len(skip))
        return [r for r in rows if r.id not in skip][:limit]

    async def acknowledge(self, ids: Sequence[int]) -> None:
        self._log.append(("deleted", tuple(ids)))
        await self._inner.acknowledge(ids)

    async def acknowledge_aside(self, ids: Sequence[int]) -> None:
        await self.acknowledge(ids)

    async def backlog(self) -> Backlog:
        return await self._inner.backlog()

    async def commit_wake_ups(self) -> asyncio.Event:
        return await self._inner.commit_wake_ups()


class PipelinedOutbox:
    """The memory outbox, with shard connections that can pipeline."""

    def __init__(self, outbox: MemoryOutbox) -> None:
        self.outbox = outbox
        self.log: Log = []

    @contextlib.asynccontextmanager
    async def shard(self, shard: Shard) -> AsyncIterator[ShardConnection]:
        async with self.outbox.shard(shard) as inner:
            yield LoggedShard(inner, self.log)

    async def republish(
        self, *, tenant: str | None = None, session: str | None = None, after_seq: int = 0
    ) -> RepublishReport:
        return await self.outbox.republish(tenant=tenant, session=session, after_seq=after_seq)


class GatedTopic:
    """A topic whose publishers hold each batch until its gate opens (open unless closed). A
    session is a partition: its records land in the order they were handed over, so a batch
    lands once every earlier batch holding one of its sessions did. A record in `fail` fails
    once, with the later records of its session in the batch; other sessions' records land.
    After a failure a publisher refuses whatever comes after (it ended, as the real one does)."""

    def __init__(self, log: Log) -> None:
        self.records: list[Record] = []
        self.handed: list[list[Record]] = []
        self.landed: list[asyncio.Event] = []
        self.closed: dict[int, asyncio.Event] = {}
        self.fail: set[Record] = set()
        self.publishers = 0
        self.log = log

    def hold(self, batch: int) -> None:
        self.closed[batch] = asyncio.Event()

    def release(self, batch: int) -> None:
        self.closed.pop(batch).set()

    async def open(self, bootstrap: str, topic: str, prefix: str, **options: object) -> Publisher:
        """Publisher.open, to this topic: its tail is everything on it."""
        self.publishers += 1
        return GatedPublisher(self)


class GatedPublisher(Publisher):
    def __init__(self, topic: GatedTopic) -> None:
        self.topic = topic
        self.idempotent = False
        self.ended = False
        found: dict[tuple[str, str], set[int]] = {}
        for session, seq in topic.records:
            found.setdefault(("acme", session), set()).add(seq)
        self.tail = PublishedTail(found)

    async def publish(self, rows: Sequence[OutboxRow]) -> PublishResult:
        topic = self.topic
        number = len(topic.handed)
        topic.handed.append(records(rows))
        topic.landed.append(asyncio.Event())
        gate = topic.closed.get(number)
        if gate is not None:
            await gate.wait()
        sessions = {s for s, _ in topic.handed[number]}
        for earlier, batch in enumerate(topic.handed[:number]):
            if sessions & {s for s, _ in batch}:
                await topic.landed[earlier].wait()
        results: list[object] = []
        failed: set[str] = set()
        ended = self.ended
        for record in records(rows):
            if ended or record in topic.fail or record[0] in failed:
                self.ended = True
                topic.fail.discard(record)
                failed.add(record[0])
                results.append(kafka.KafkaTimeoutError())
            else:
                topic.records.append(record)
                results.append(ACKED)
        topic.landed[number].set()
        topic.log.append(("acked", number))
        return acknowledged(results)

    async def close(self) -> None:
        pass


CONFIG = RelayConfig(
    "memory",
    KafkaSettings("memory"),
    batch_size=2,
    batches_in_flight=3,
    poll_interval_s=0.01,
    retry=relay_retry(initial_s=0, maximum_s=0),
)


@pytest.fixture
def log() -> Log:
    return []


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch, log: Log) -> GatedTopic:
    gated = GatedTopic(log)
    monkeypatch.setattr(Publisher, "open", staticmethod(gated.open))
    return gated


async def pipelined(*sessions: str, each: int, log: Log) -> PipelinedOutbox:
    outbox = PipelinedOutbox(await outbox_with(*sessions, each=each))
    outbox.log = log
    return outbox


async def backlog(outbox: PipelinedOutbox) -> int:
    async with outbox.outbox.shard(Shard()) as probe:
        return (await probe.backlog()).events


@contextlib.asynccontextmanager
async def running(outbox: PipelinedOutbox, config: RelayConfig = CONFIG) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.create_task(Relay(outbox, config).run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def drained(outbox: PipelinedOutbox) -> None:
    async def empty() -> bool:
        return await backlog(outbox) == 0

    await wait_until(empty, 5, "the outbox to drain", interval_s=0.01)


def skipped() -> float:
    return REGISTRY.get_sample_value("keel_relay_skipped_events_total") or 0.0


def in_commit_order(*sessions: str, each: int) -> list[Record]:
    return [(s, n) for n in range(1, each + 1) for s in sessions]


async def test_the_next_batches_are_handed_over_while_the_first_awaits_its_acknowledgements(
    topic: GatedTopic, log: Log
) -> None:
    outbox = await pipelined("s1", "s2", each=6, log=log)
    topic.hold(0)
    async with running(outbox):

        async def three_handed() -> bool:
            return len(topic.handed) == 3

        await wait_until(three_handed, 5, "three batches in flight", interval_s=0.01)
        everything = in_commit_order("s1", "s2", each=6)
        assert topic.handed == [everything[0:2], everything[2:4], everything[4:6]], (
            "each batch fetched past the ones in flight, in outbox order"
        )
        assert await backlog(outbox) == 12, "nothing deleted before its acknowledgement"
        assert not [entry for entry in log if entry[0] == "deleted"]
        topic.release(0)
        await drained(outbox)
    assert sorted(topic.records) == sorted(everything)
    for session in ("s1", "s2"):
        assert [n for s, n in topic.records if s == session] == list(range(1, 7))
    assert len(topic.handed) == 6, "each row handed over once"


async def test_rows_are_deleted_only_once_their_batch_and_every_earlier_one_were_acknowledged(
    topic: GatedTopic, log: Log
) -> None:
    # Six sessions of one event: the batches share no partition, so they can be acknowledged
    # in any order.
    outbox = await pipelined("a", "b", "c", "d", "e", "f", each=1, log=log)
    topic.hold(0)
    topic.hold(1)
    async with running(outbox):

        async def acked(batch: int) -> bool:
            return ("acked", batch) in log

        await wait_until(lambda: acked(2), 5, "the third batch's acknowledgement", 0.01)
        topic.release(1)
        await wait_until(lambda: acked(1), 5, "the second batch's acknowledgement", 0.01)
        topic.release(0)
        await drained(outbox)
    handed_rows = [row for batch in topic.handed for row in batch]
    assert handed_rows == in_commit_order("a", "b", "c", "d", "e", "f", each=1)
    assert log.index(("acked", 2)) < log.index(("acked", 1)) < log.index(("acked", 0))
    first_delete = next(i for i, entry in enumerate(log) if entry[0] == "deleted")
    assert log.index(("acked", 0)) < first_delete, "batches 2 and 3 waited for batch 1's ack"
    deleted = [i for kind, ids in log if kind == "deleted" and isinstance(ids, tuple) for i in ids]
    assert deleted == sorted(deleted), "deleted in outbox order: batch by batch, as handed over"
    assert len(deleted) == 6


async def test_after_a_failed_batch_the_later_ones_in_flight_count_for_nothing_nor_land_twice(
    topic: GatedTopic, log: Log
) -> None:
    # s1/1 fails in the first batch (s1/1, s2/1); the second (s1/2, s2/2) and third (s1/3, s2/3)
    # are in flight and fail behind it (the publisher ended). s2/1 landed: the next publisher
    # finds it on the tail and only deletes it.
    outbox = await pipelined("s1", "s2", each=3, log=log)
    topic.fail = {("s1", 1)}
    topic.hold(0)
    before = skipped()
    async with running(outbox):

        async def three_handed() -> bool:
            return len(topic.handed) == 3

        await wait_until(three_handed, 5, "three batches in flight", interval_s=0.01)
        topic.release(0)
        await drained(outbox)
    assert topic.publishers == 2, "the failure ended the publisher; a new one read the tail"
    assert topic.handed[3][0] == ("s1", 1), "sent again from the first unacknowledged row"
    assert sorted(topic.records) == sorted(in_commit_order("s1", "s2", each=3)), "each once"
    for session in ("s1", "s2"):
        assert [n for s, n in topic.records if s == session] == [1, 2, 3], "in seq order"
    assert skipped() - before == 1, "s2/1 landed before the failure: deleted, not sent again"


async def test_one_batch_at_a_time_over_a_shard_connection_that_cannot_fetch_past_rows(
    topic: GatedTopic,
) -> None:
    outbox = await outbox_with("s1", each=4)  # the plain memory outbox: no fetch_excluding
    assert not isinstance(outbox, PipelinedShard)
    topic.hold(0)
    stop = asyncio.Event()
    task = asyncio.create_task(Relay(outbox, CONFIG).run(stop))
    try:

        async def handed() -> bool:
            return len(topic.handed) == 1

        await wait_until(handed, 5, "the first batch", interval_s=0.01)
        topic.release(0)

        async def all_handed() -> bool:
            return len(topic.records) == 4

        await wait_until(all_handed, 5, "every event on the topic", interval_s=0.01)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
    assert topic.handed == [[("s1", 1), ("s1", 2)], [("s1", 3), ("s1", 4)]]


def test_the_tail_reaches_back_over_every_batch_that_can_be_in_flight() -> None:
    assert tail_depth(500, 1, None, in_flight=3) == 1500
    assert tail_depth(50, 4, None, in_flight=3) == 600
    assert tail_depth(500, 1, 0, in_flight=3) == 0


@pytest.mark.parametrize("partitions", [1, 3, 12])
def test_a_session_lands_in_the_partition_the_producers_send_would_pick(partitions: int) -> None:
    choose = Partitioner()
    choose.use(range(partitions))
    default = DefaultPartitioner()
    for i in range(200):
        key = record_key("acme", f"session-{i}")
        assert choose(key) == default(key, list(range(partitions)), list(range(partitions)))
    choose.use(range(partitions + 1))  # partitions added: every key is placed again
    key = record_key("acme", "session-7")
    assert choose(key) == default(key, list(range(partitions + 1)), [])
