"""The relay's partial acks on the memory outbox: of a batch, the records the broker acknowledged
from the first up to the first failure leave the outbox; the rest stay, in order, and the next
fetch starts at the first of them."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from aiokafka.errors import KafkaTimeoutError, RequestTimedOutError

from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import CommitRequest
from keel_stream.relay.publisher import Publisher, PublishResult, acknowledged
from keel_stream.relay.relay import Relay, RelayConfig, delete_acknowledged
from keel_stream.relay.retry import relay_retry
from keel_stream.relay.skip import PublishedTail
from keel_stream.store import MemoryStore
from keel_stream.store.memory_outbox import MemoryOutbox
from keel_stream.store.outbox import OutboxRow, Shard, ShardConnection

ACKED = object()
"""A record's result when the broker acknowledged it (its metadata: only its kind matters)."""


async def outbox_with(*sessions: str, each: int) -> MemoryOutbox:
    """The outbox of a ledger with tenant acme and `each` user messages per session, committed
    round-robin over the sessions."""
    ledger = MemoryStore()
    outbox = MemoryOutbox(ledger)
    await ledger.create_tenant("acme")
    for session in sessions:
        await ledger.create_session("acme", session)
    for i in range(each):
        for session in sessions:
            payload = {"text": f"{session} {i}"}
            request = CommitRequest(
                tenant_id="acme", session_id=session, kind="user.message", payload=payload
            )
            await ledger.commit(request)
    return outbox


def seqs(rows: Sequence[OutboxRow]) -> list[tuple[str, int]]:
    return [(r.session, r.seq) for r in rows]


async def publish(
    shard: ShardConnection, results: Sequence[object], send_error: BaseException | None = None
) -> tuple[list[OutboxRow], PublishResult, list[OutboxRow]]:
    """Fetch a batch, take the broker's per-record results for it and delete what they
    acknowledged: the batch, the result, and the rows deleted."""
    rows = await shard.fetch(100)
    result = acknowledged(results, send_error)
    return rows, result, await delete_acknowledged(shard, rows, result)


async def test_acked_records_before_the_first_failure_leave_and_the_next_fetch_starts_after() -> (
    None
):
    outbox = await outbox_with("s1", each=6)
    async with outbox.shard(Shard()) as shard:
        failure = KafkaTimeoutError()
        rows, result, deleted = await publish(shard, [ACKED] * 3 + [failure] * 3)
        assert result == PublishResult(acked=3, error=failure)
        assert deleted == rows[:3]
        left = await shard.fetch(100)
        assert left == rows[3:], "records 4.. stay, in order, the same rows"
        assert seqs(left)[0] == ("s1", 4)
        assert (await shard.backlog()).events == 3


async def test_a_record_acked_after_one_that_failed_stays_to_be_sent_again_after_it() -> None:
    outbox = await outbox_with("s1", each=6)
    async with outbox.shard(Shard()) as shard:
        failure = RequestTimedOutError()
        rows, result, _ = await publish(shard, [ACKED] * 3 + [failure] + [ACKED] * 2)
        assert result == PublishResult(acked=3, error=failure)
        assert await shard.fetch(100) == rows[3:]


async def test_a_send_that_raised_ends_the_batch_and_is_the_error_reported() -> None:
    outbox = await outbox_with("s1", each=6)
    async with outbox.shard(Shard()) as shard:
        # Records 1 and 2 were sent (1 acknowledged, 2 failed); sending 3 raised.
        stopped = KafkaTimeoutError()
        rows, result, _ = await publish(shard, [ACKED, RequestTimedOutError()], stopped)
        assert result == PublishResult(acked=1, error=stopped)
        assert await shard.fetch(100) == rows[1:]


async def test_a_batch_whose_first_record_failed_leaves_the_outbox_as_it_was() -> None:
    outbox = await outbox_with("s1", each=3)
    async with outbox.shard(Shard()) as shard:
        rows, result, deleted = await publish(shard, [KafkaTimeoutError(), ACKED, ACKED])
        assert (result.acked, deleted) == (0, [])
        assert await shard.fetch(100) == rows


async def test_a_fully_acked_batch_empties_the_outbox_and_reports_no_error() -> None:
    outbox = await outbox_with("s1", each=3)
    async with outbox.shard(Shard()) as shard:
        rows, result, deleted = await publish(shard, [ACKED] * 3)
        assert (result, deleted) == (PublishResult(acked=3, error=None), rows)
        assert await shard.fetch(100) == []
        assert (await shard.backlog()).events == 0


async def test_what_stays_keeps_each_sessions_events_in_seq_order() -> None:
    outbox = await outbox_with("s1", "s2", each=4)  # s1/1, s2/1, s1/2, s2/2, ...
    async with outbox.shard(Shard()) as shard:
        _, _, deleted = await publish(shard, [ACKED] * 3 + [KafkaTimeoutError()] * 5)
        assert seqs(deleted) == [("s1", 1), ("s2", 1), ("s1", 2)]
        left = seqs(await shard.fetch(100))
        assert left == [("s2", 2), ("s1", 3), ("s2", 3), ("s1", 4), ("s2", 4)]


class ScriptedBroker(Publisher):
    """A publisher whose broker fails the given (session, seq) records once each, and with each
    the records sent after it in the same batch (as a failed produce request does)."""

    def __init__(self, fail_once: set[tuple[str, int]], expected: int) -> None:
        self.fail_once = fail_once
        self.expected = expected
        self.topic: list[tuple[str, int]] = []
        self.batches: list[list[tuple[str, int]]] = []
        self.complete = asyncio.Event()
        self.idempotent = False
        self.tail = PublishedTail()  # an empty topic

    async def connected(
        self, bootstrap: str, topic: str, prefix: str, **options: object
    ) -> Publisher:
        """Publisher.open, to this broker."""
        return self

    async def publish(self, rows: Sequence[OutboxRow]) -> PublishResult:
        self.batches.append(seqs(rows))
        results: list[object] = []
        for record in seqs(rows):
            if (results and results[-1] is not ACKED) or record in self.fail_once:
                self.fail_once.discard(record)
                results.append(KafkaTimeoutError())
            else:
                self.topic.append(record)
                results.append(ACKED)
        if len(self.topic) >= self.expected:
            self.complete.set()
        return acknowledged(results)

    async def close(self) -> None:
        pass


async def test_the_relay_sends_again_from_the_first_unacked_record_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outbox = await outbox_with("s1", each=6)
    broker = ScriptedBroker(fail_once={("s1", 4)}, expected=6)
    monkeypatch.setattr(Publisher, "open", staticmethod(broker.connected))
    config = RelayConfig(
        "memory",
        KafkaSettings("memory"),
        poll_interval_s=0.01,
        retry=relay_retry(initial_s=0, maximum_s=0),
    )
    stop = asyncio.Event()
    relay = asyncio.create_task(Relay(outbox, config).run(stop))
    await asyncio.wait_for(broker.complete.wait(), 5)
    stop.set()
    await asyncio.wait_for(relay, 5)
    s1 = [("s1", seq) for seq in range(1, 7)]
    assert broker.batches == [s1, s1[3:]], "the second batch starts at the record that failed"
    assert broker.topic == s1, "each event reached the topic once, in order"
    async with outbox.shard(Shard()) as shard:
        assert await shard.fetch(100) == []
