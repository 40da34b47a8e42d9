"""Publishing outbox rows to keel.events.v1 and telling which of them the broker acknowledged.

Several batches can be published at once (the relay hands over the next batch while the
previous one's acknowledgements are outstanding): each `publish` queues its records after those
of every earlier call, in call order, then waits for its own acknowledgements. The first record
that fails ends the publisher: nothing queued behind it is sent any more (its batches fail with
the same error), so no later record of a session can land while an earlier one is to be sent
again. The relay then opens a new publisher, which reads the topic's tail first.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from keel_stream.errors import BrokerUnavailable
from keel_stream.kafka.admin import apply_catalog
from keel_stream.kafka.producer import BatchProducer, Partitioner, Queued
from keel_stream.kafka.records import EventRecordCodec, OutgoingRecord
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kafka.tail import published_seqs
from keel_stream.relay.skip import PublishedTail
from keel_stream.store.outbox import OutboxRow
from keel_stream.topics.catalog import EVENTS

__all__ = ["PublishResult", "Publisher", "acknowledged"]

ACK_TIMEOUT_S: Final = 30.0
"""How long a batch may wait for its acknowledgements before the publisher gives up on it."""
_STOP_TIMEOUT_S: Final = 10.0


@dataclass(frozen=True, slots=True)
class PublishResult:
    """How many rows, from the first, the broker acknowledged; and why it stopped short."""

    acked: int
    error: BaseException | None


def acknowledged(
    results: Sequence[object], send_error: BaseException | None = None
) -> PublishResult:
    """A batch's outcome from its records' results, in send order (the broker's metadata, or the
    exception the record failed with), and the error that stopped sending early, if one did.

    Only the records from the first up to the first failure count as acknowledged: a record the
    broker acknowledged after one that failed stays in the outbox and is sent again after it, so
    each session's events reach the topic in seq order. The error is the one that stopped sending,
    else the first failed record's.
    """
    acked = 0
    error = send_error
    for result in results:
        if isinstance(result, BaseException):
            error = error or result
            break
        acked += 1
    return PublishResult(acked=acked, error=error)


def _outcome(future: asyncio.Future[Any]) -> object:
    """A record's result: its metadata, its exception, or a timeout if it has neither."""
    if not future.done():
        return BrokerUnavailable("no acknowledgement, and the batch was not failed either")
    if future.cancelled():
        return BrokerUnavailable("the record was cancelled before its acknowledgement")
    return future.exception() or future.result()


def _records(
    rows: Sequence[OutboxRow], claim_check: Mapping[str, Any] | None
) -> Iterator[OutgoingRecord]:
    for row in rows:
        if claim_check is not None:
            yield EventRecordCodec.claim_check(
                row.tenant, row.session, row.seq, row.kind, row.committed_at, claim_check
            )
        else:
            yield EventRecordCodec.encode(
                row.tenant,
                row.session,
                row.seq,
                row.kind,
                row.payload,
                row.committed_at,
                row.metadata,
            )


class Publisher:
    """A producer (acks=all; idempotent where the broker offers it) for one topic,
    and what the topic's tail held when it opened.

    Correctness does not rest on producer idempotence or transactions (not every broker speaks
    them): a row is acknowledged or it is sent again, and consumers de-duplicate by seq. The
    idempotent producer keeps a batch that the client retries from landing twice; the tail keeps a
    batch that an earlier publisher wrote and could not delete from being sent again.
    """

    def __init__(
        self,
        topic: str,
        producer: BatchProducer,
        *,
        tail: PublishedTail | None = None,
        ack_timeout_s: float = ACK_TIMEOUT_S,
        max_record_bytes: int = EVENTS.max_message_bytes,
    ) -> None:
        self._topic = topic
        self._producer = producer
        self.idempotent = producer.idempotent
        self.tail = tail if tail is not None else PublishedTail()
        self._ack_timeout_s = ack_timeout_s
        self._max_record_bytes = max_record_bytes
        self._partitioner = Partitioner()
        self._queueing = asyncio.Lock()  # FIFO: calls queue their records in call order
        self._ended: BaseException | None = None
        """The failure that ended this publisher: nothing is queued after it."""

    @classmethod
    async def open(
        cls,
        kafka: KafkaSettings,
        topic: str,
        prefix: str,
        *,
        try_idempotent: bool = True,
        tail_depth: int = 0,
        ack_timeout_s: float = ACK_TIMEOUT_S,
        max_record_bytes: int = EVENTS.max_message_bytes,
    ) -> Publisher:
        """Make sure the catalog's topics exist, connect a producer (that refuses records over
        `max_record_bytes`), then read the last `tail_depth` records of each partition of the
        topic (0: none).

        The topics are (re)applied on every open because a broker that lost its data (the
        memory-only dev broker after a restart) would otherwise auto-create them with defaults.
        """
        await apply_catalog(kafka, prefix)
        producer = await BatchProducer.start(
            kafka, "relay", try_idempotent=try_idempotent, max_record_bytes=max_record_bytes
        )
        try:
            tail = PublishedTail(await published_seqs(kafka, topic, tail_depth))
        except BaseException:
            await producer.close()
            raise
        return cls(
            topic,
            producer,
            tail=tail,
            ack_timeout_s=ack_timeout_s,
            max_record_bytes=max_record_bytes,
        )

    async def publish(self, rows: Sequence[OutboxRow]) -> PublishResult:
        """Send rows in order, after those of every earlier call, and wait for their
        acknowledgements (up to the ack timeout)."""
        return await self._send(rows, None)

    async def publish_claim_check(
        self, row: OutboxRow, details: Mapping[str, Any]
    ) -> PublishResult:
        """Send the claim check of a row the broker refused (keel_stream.kafka.records), in
        its place, and wait for its acknowledgement."""
        return await self._send([row], details)

    async def _send(
        self, rows: Sequence[OutboxRow], claim_check: Mapping[str, Any] | None
    ) -> PublishResult:
        async with self._queueing:
            if self._ended is not None:
                return PublishResult(acked=0, error=copy.copy(self._ended))
            queued = await self._producer.queue(
                self._topic,
                _records(rows, claim_check),
                self._partitioner,
                self._max_record_bytes,
                self._settled,
            )
            if queued.error is not None:
                # Nothing after a record that could not be queued: the ones before it go.
                self._ended = queued.error
        return await self._acknowledged(queued)

    async def _acknowledged(self, queued: Queued) -> PublishResult:
        if queued.futures:
            _, late = await asyncio.wait(queued.futures, timeout=self._ack_timeout_s)
            if late:
                self._end(BrokerUnavailable(f"no acknowledgement within {self._ack_timeout_s}s"))
                await asyncio.wait(late, timeout=_STOP_TIMEOUT_S)  # failed by _end, at once
        outcomes = [_outcome(queued.futures[slot]) for slot in queued.owners]
        return acknowledged(outcomes, queued.error)

    def _settled(self, future: asyncio.Future[Any]) -> None:
        # A batch's callback runs before the producer's sender takes another batch (the sender
        # is woken by callbacks scheduled after this one), so nothing queued behind a failed
        # batch is sent.
        error = None if future.cancelled() else future.exception()
        if error is not None:
            self._end(error)

    def _end(self, error: BaseException) -> None:
        """Stop sending: every batch the producer still holds fails with the first error."""
        if self._ended is None:
            self._ended = error
        self._producer.stop_sending(self._ended)

    async def close(self) -> None:
        """Stop the producer.

        Records still unacknowledged (the idempotent producer retries a batch until it
        is delivered, and never gives one up) are abandoned first: stopping would otherwise wait
        for a broker that may not come back, and a batch delivered later would land behind the
        next publisher's tail read.
        """
        await self._producer.close()
