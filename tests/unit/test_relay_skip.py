"""Events the topic holds already are deleted from the outbox, not sent again: after a relay died
between publishing and deleting, and after a batch that failed part way. The rule (a row is left
out only when its very seq was found), the depth of the tail read, the producer's mode and the
relay around them, on the memory outbox and a scripted topic."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from aiokafka import errors as kafka
from prometheus_client import REGISTRY

from keel_stream.kafka.errors import idempotence_unsupported, producer_session_lost
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.relay.publisher import Publisher, PublishResult, acknowledged
from keel_stream.relay.relay import Relay, RelayConfig
from keel_stream.relay.retry import is_retriable, relay_retry
from keel_stream.relay.skip import PublishedTail, tail_depth
from keel_stream.store.memory_outbox import MemoryOutbox
from keel_stream.store.outbox import OutboxRow, Shard
from tests.support.wait import wait_until
from tests.unit.test_relay_acks import ACKED, outbox_with

Record = tuple[str, int]
"""(session, seq) of tenant acme"""


def row(session: str, seq: int, row_id: int = 0) -> OutboxRow:
    return OutboxRow(row_id, "acme", session, seq, "user.message", {}, datetime.now(UTC))


def records(rows: Sequence[OutboxRow]) -> list[Record]:
    return [(r.session, r.seq) for r in rows]


def test_rows_found_on_the_tail_are_split_off_and_the_rest_keep_outbox_order() -> None:
    tail = PublishedTail({("acme", "s1"): {1, 2}, ("acme", "s2"): {1}})
    batch = [row("s1", 1), row("s2", 1), row("s1", 2), row("s2", 2), row("s1", 3)]
    found, send = tail.split(batch)
    assert records(found) == [("s1", 1), ("s2", 1), ("s1", 2)]
    assert records(send) == [("s2", 2), ("s1", 3)]
    assert len(tail) == 0, "every event found was accounted for"


def test_a_row_missing_from_the_tail_is_sent_even_below_its_sessions_head() -> None:
    # The topic holds s1/4 but not s1/3 (a batch that failed while a later one landed): s1/3 is
    # sent, never lost; s1/4 is not sent twice.
    tail = PublishedTail({("acme", "s1"): {4}})
    assert tail.heads == {("acme", "s1"): 4}
    found, send = tail.split([row("s1", 3), row("s1", 4), row("s1", 5)])
    assert (records(found), records(send)) == ([("s1", 4)], [("s1", 3), ("s1", 5)])


def test_another_tenants_session_of_the_same_name_is_not_matched() -> None:
    tail = PublishedTail({("other", "s1"): {1}})
    found, send = tail.split([row("s1", 1)])
    assert (found, records(send)) == ([], [("s1", 1)])


def test_a_found_row_is_forgotten_and_forget_drops_the_rest() -> None:
    tail = PublishedTail({("acme", "s1"): {1, 2}})
    assert records(tail.split([row("s1", 1)])[0]) == [("s1", 1)]
    assert tail.split([row("s1", 1)])[0] == [], "a row found once is not found again"
    tail.forget()
    assert (len(tail), tail.heads) == (0, {})


@pytest.mark.parametrize(
    ("batch_size", "shards", "configured", "depth"),
    [(500, 1, None, 500), (50, 4, None, 200), (500, 1, 2000, 2000), (500, 1, 0, 0)],
)
def test_the_tail_depth_is_one_batch_per_shard_unless_configured(
    batch_size: int, shards: int, configured: int | None, depth: int
) -> None:
    assert tail_depth(batch_size, shards, configured) == depth


@pytest.mark.parametrize(
    "exc",
    [
        kafka.UnknownError(),
        kafka.UnsupportedVersionError(),
        kafka.IncompatibleBrokerVersion(),
        NotImplementedError("Support for InitProducerIdRequest v2 has not yet been added"),
    ],
)
def test_a_broker_without_producer_ids_means_a_plain_producer(exc: BaseException) -> None:
    assert idempotence_unsupported(exc)


@pytest.mark.parametrize(
    "exc", [kafka.KafkaConnectionError(), kafka.KafkaTimeoutError(), kafka.NodeNotReadyError()]
)
def test_an_unreachable_broker_is_not_taken_for_one_without_producer_ids(
    exc: BaseException,
) -> None:
    assert not idempotence_unsupported(exc)


@pytest.mark.parametrize(
    "exc",
    [kafka.OutOfOrderSequenceNumber(), kafka.ProducerFenced(), kafka.UnknownProducerId()],
)
def test_a_lost_producer_session_is_retried_with_a_new_producer(exc: BaseException) -> None:
    assert producer_session_lost(exc)
    assert is_retriable(exc)


class ScriptedTopic:
    """A topic that outlives its publishers: each opens with the topic's content as its tail."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.publishers: list[ScriptedPublisher] = []
        self.fail: set[Record] = set()
        """Records that fail once, with the later records of their session in the batch."""
        self.die_after: Record | None = None
        """After publishing the batch that holds it, the publisher never returns."""
        self.died = asyncio.Event()

    async def open(self, bootstrap: str, topic: str, prefix: str, **options: object) -> Publisher:
        """Publisher.open, to this topic."""
        publisher = ScriptedPublisher(self)
        self.publishers.append(publisher)
        return publisher


class ScriptedPublisher(Publisher):
    """Writes to its topic; a record in the topic's `fail` fails once, with the later records of
    its session in the batch (one partition), while other sessions' records land. After
    publishing the batch that holds the topic's `die_after`, it never returns (the process died
    before deleting)."""

    def __init__(self, topic: ScriptedTopic) -> None:
        self.topic = topic
        self.idempotent = False
        found: dict[tuple[str, str], set[int]] = {}
        for session, seq in topic.records:
            found.setdefault(("acme", session), set()).add(seq)
        self.tail = PublishedTail(found)

    async def publish(self, rows: Sequence[OutboxRow]) -> PublishResult:
        results: list[object] = []
        failed: set[str] = set()
        for record in records(rows):
            if record in self.topic.fail or record[0] in failed:
                self.topic.fail.discard(record)
                failed.add(record[0])
                results.append(kafka.KafkaTimeoutError())
            else:
                self.topic.records.append(record)
                results.append(ACKED)
        if self.topic.die_after in records(rows):
            self.topic.died.set()
            await asyncio.Event().wait()
        return acknowledged(results)

    async def close(self) -> None:
        pass


@pytest.fixture
def topic(monkeypatch: pytest.MonkeyPatch) -> ScriptedTopic:
    scripted = ScriptedTopic()
    monkeypatch.setattr(Publisher, "open", staticmethod(scripted.open))
    return scripted


CONFIG = RelayConfig(
    "memory",
    KafkaSettings("memory"),
    batch_size=4,
    poll_interval_s=0.01,
    retry=relay_retry(initial_s=0, maximum_s=0),
)


def skipped() -> float:
    return REGISTRY.get_sample_value("keel_relay_skipped_events_total") or 0.0


async def drain(relay: Relay, outbox: MemoryOutbox) -> None:
    """Run the relay until the outbox is empty."""
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        async with outbox.shard(Shard()) as probe:

            async def empty() -> bool:
                return (await probe.backlog()).events == 0

            await wait_until(empty, 5, "the outbox to drain", interval_s=0.01)
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)


async def test_a_relay_taking_over_after_a_death_between_publish_and_delete_sends_nothing_twice(
    topic: ScriptedTopic,
) -> None:
    outbox = await outbox_with("s1", "s2", each=4)
    topic.die_after = ("s2", 2)  # the first batch: s1/1, s2/1, s1/2, s2/2
    first = asyncio.create_task(Relay(outbox, CONFIG).run(asyncio.Event()))
    await asyncio.wait_for(topic.died.wait(), 5)
    first.cancel()  # killed: nothing after the publish runs
    with contextlib.suppress(asyncio.CancelledError):
        await first
    before = skipped()
    await drain(Relay(outbox, CONFIG), outbox)
    expected = [(s, n) for n in range(1, 5) for s in ("s1", "s2")]
    assert topic.records == expected, "each event on the topic once, in commit order"
    assert skipped() - before == 4, "the dead relay's last batch was deleted, not sent again"


async def test_a_relay_retrying_a_batch_that_failed_part_way_sends_nothing_twice(
    topic: ScriptedTopic,
) -> None:
    outbox = await outbox_with("s1", "s2", each=4)
    # s1/1 fails; s2/1 and s2/2 of the same batch land (another partition) yet stay in the
    # outbox behind s1/1. The retry's publisher reads them on the tail and deletes them.
    topic.fail = {("s1", 1)}
    before = skipped()
    await drain(Relay(outbox, CONFIG), outbox)
    assert len(topic.publishers) == 2, "the failed batch closed the publisher; a new one retried"
    assert sorted(topic.records) == sorted((s, n) for n in range(1, 5) for s in ("s1", "s2"))
    for session in ("s1", "s2"):
        assert [n for s, n in topic.records if s == session] == [1, 2, 3, 4]
    assert skipped() - before == 2
