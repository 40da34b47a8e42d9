"""Records the broker refuses for what they are: sent alone, then as claim checks, in their
place; the relay goes on with every other event, and a session's seqs stay in order."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from aiokafka import errors as kafka
from prometheus_client import REGISTRY

from keel_stream.kafka.records import CLAIM_CHECK_HEADER, EventRecordCodec, is_claim_check
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.relay.publisher import Publisher, PublishResult, acknowledged
from keel_stream.relay.refusals import Refusals, refusal
from keel_stream.relay.relay import Relay, RelayConfig
from keel_stream.relay.retry import relay_retry
from keel_stream.relay.skip import PublishedTail
from keel_stream.store.memory_outbox import MemoryOutbox
from keel_stream.store.outbox import OutboxRow, Shard
from tests.unit.test_relay_acks import ACKED, outbox_with, seqs

Record = tuple[str, int]
_STAMP = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (kafka.MessageSizeTooLargeError(), "too_large"),
        (kafka.RecordListTooLargeError(), "too_large"),
        (kafka.CorruptRecordException(), "refused"),
        (kafka.UnknownError(), "refused"),  # INVALID_RECORD (87) reaches aiokafka as this
        (orjson.JSONEncodeError("Integer exceeds 64-bit range"), "unencodable"),
        (kafka.KafkaTimeoutError(), None),
        (kafka.KafkaConnectionError(), None),
        (kafka.TopicAuthorizationFailedError(), None),
        (kafka.OutOfOrderSequenceNumber(), None),
    ],
)
def test_only_failures_about_the_record_itself_are_refusals(
    exc: BaseException, reason: str | None
) -> None:
    assert refusal(exc) == reason


def test_a_claim_check_keeps_the_envelope_and_says_why_in_its_header() -> None:
    event = EventRecordCodec.encode("acme", "s1", 7, "user.message", {"text": "hi"}, _STAMP)
    check = EventRecordCodec.claim_check(
        "acme", "s1", 7, "user.message", _STAMP, {"reason": "too_large", "payloadBytes": 9}
    )
    assert check.key == event.key
    assert check.headers == [*event.headers, (CLAIM_CHECK_HEADER, b"too_large")]
    decoded = EventRecordCodec.decode(check.value)
    assert (decoded.tenant, decoded.session, decoded.seq, decoded.kind) == (
        "acme",
        "s1",
        7,
        "user.message",
    )
    assert decoded.committed_at == _STAMP
    assert is_claim_check(decoded.payload)
    assert not is_claim_check({"keel.claimCheck": {}, "text": "a payload that says more"})
    assert not is_claim_check(EventRecordCodec.decode(event.value).payload)


class RefusingBroker(Publisher):
    """A broker that refuses the given records whenever they are sent, and with each the records
    sent after it in the same batch (one produce request); claim checks it takes."""

    def __init__(self, refuse: set[Record], expected: int, error: BaseException) -> None:
        self.refuse = refuse
        self.expected = expected
        self.error = error
        self.topic: list[tuple[Record, bool]] = []
        """(record, whether it arrived as a claim check), in arrival order."""
        self.batches: list[list[Record]] = []
        self.complete = asyncio.Event()
        self.idempotent = False
        self.tail = PublishedTail()

    async def connected(self, bootstrap: str, topic: str, prefix: str, **_: object) -> Publisher:
        return self

    async def publish(self, rows: Sequence[OutboxRow]) -> PublishResult:
        self.batches.append(seqs(rows))
        results: list[object] = []
        for record in seqs(rows):
            if (results and results[-1] is not ACKED) or record in self.refuse:
                results.append(self.error)
            else:
                self.topic.append((record, False))
                results.append(ACKED)
        self._check()
        return acknowledged(results)

    async def publish_claim_check(
        self, row: OutboxRow, details: Mapping[str, Any]
    ) -> PublishResult:
        assert details["reason"] == refusal(self.error)
        self.topic.append(((row.session, row.seq), True))
        self._check()
        return acknowledged([ACKED])

    def _check(self) -> None:
        if len(self.topic) >= self.expected:
            self.complete.set()

    async def close(self) -> None:
        pass


async def run_until_published(outbox: MemoryOutbox, broker: RefusingBroker) -> None:
    config = RelayConfig(
        "memory",
        KafkaSettings("memory"),
        poll_interval_s=0.01,
        retry=relay_retry(initial_s=0, maximum_s=0),
    )
    stop = asyncio.Event()
    relay = asyncio.create_task(Relay(outbox, config).run(stop))
    try:
        await asyncio.wait_for(broker.complete.wait(), 5)
    finally:
        stop.set()
        await asyncio.wait_for(relay, 5)


def claim_checked() -> float:
    return REGISTRY.get_sample_value("keel_relay_claim_checked_events_total") or 0.0


async def test_a_refused_record_goes_out_as_a_claim_check_and_the_relay_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outbox = await outbox_with("s1", "s2", each=3)  # s1/1, s2/1, s1/2, s2/2, s1/3, s2/3
    broker = RefusingBroker({("s1", 2)}, expected=6, error=kafka.MessageSizeTooLargeError())
    monkeypatch.setattr(Publisher, "open", staticmethod(broker.connected))
    before = claim_checked()
    await run_until_published(outbox, broker)
    everything = [("s1", 1), ("s2", 1), ("s1", 2), ("s2", 2), ("s1", 3), ("s2", 3)]
    assert broker.batches[:2] == [everything, [("s1", 2)]], "refused in a batch, then alone"
    assert broker.topic == [
        (("s1", 1), False),
        (("s2", 1), False),
        (("s1", 2), True),
        (("s2", 2), False),
        (("s1", 3), False),
        (("s2", 3), False),
    ], "every seq once, in order; the refused one as its claim check, in its place"
    assert claim_checked() == before + 1
    async with outbox.shard(Shard()) as shard:
        assert await shard.fetch(100) == []


async def test_a_record_refused_only_with_its_batch_is_sent_alone_and_not_claim_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outbox = await outbox_with("s1", each=4)

    class BatchTooLarge(RefusingBroker):
        async def publish(self, rows: Sequence[OutboxRow]) -> PublishResult:
            if len(rows) > 1:  # the batch as a whole is refused, never a record on its own
                self.batches.append(seqs(rows))
                return acknowledged([self.error] * len(rows))
            return await super().publish(rows)

    broker = BatchTooLarge(set(), expected=4, error=kafka.RecordListTooLargeError())
    monkeypatch.setattr(Publisher, "open", staticmethod(broker.connected))
    await run_until_published(outbox, broker)
    assert [record for record, _ in broker.topic] == [("s1", seq) for seq in range(1, 5)]
    assert not any(as_claim_check for _, as_claim_check in broker.topic)


async def test_a_refused_claim_check_stops_the_relay_with_the_error() -> None:
    outbox = await outbox_with("s1", each=1)
    async with outbox.shard(Shard()) as shard:
        (row,) = await shard.fetch(10)
    refusals = Refusals()
    error = kafka.MessageSizeTooLargeError()
    assert refusals.refused([row], 0, error, claim_check=False)
    assert refusals.claim_check_for([row]) == {
        "reason": "too_large",
        "error": "MessageSizeTooLargeError",
        "payloadBytes": len(orjson.dumps(row.payload)),
    }
    assert not refusals.refused([row], 0, error, claim_check=True), "handled as any failure"
    assert not refusals.refused([row], 0, kafka.KafkaTimeoutError(), claim_check=False)


async def test_a_refused_row_that_left_the_outbox_otherwise_is_forgotten() -> None:
    outbox = await outbox_with("s1", each=3)
    async with outbox.shard(Shard()) as shard:
        rows = await shard.fetch(10)
    refusals = Refusals()
    assert refusals.refused(rows, 0, kafka.MessageSizeTooLargeError(), claim_check=False)
    assert refusals.batch_size(500) == 1
    refusals.fetched(rows[1].id)  # found on the topic, deleted by the tail skip
    assert refusals.batch_size(500) == 500
