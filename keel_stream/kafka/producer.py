"""A producer that takes records in closed batches and can be made to stop sending at once: what
the relay's publisher (keel_stream.relay.publisher) needs of the Kafka client.

Starting it asks for an idempotent producer where the settings allow it and the broker offers
producer ids, and falls back to a plain one where the broker has none. Stopping it abandons the
batches it still holds (aiokafka's idempotent producer retries a batch until it is delivered and
never gives one up).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any, Final

from aiokafka import AIOKafkaProducer

from keel_stream.kafka import clients
from keel_stream.kafka.batching import Partitioner, Queued, queue_records
from keel_stream.kafka.errors import idempotence_unsupported
from keel_stream.kafka.records import OutgoingRecord
from keel_stream.kafka.settings import KafkaSettings

__all__ = ["BatchProducer", "Partitioner", "Queued"]

_STOP_TIMEOUT_S: Final = 10.0


def _retrieved(future: asyncio.Future[Any]) -> None:
    if future.done() and not future.cancelled():
        future.exception()


async def _started(
    kafka: KafkaSettings, role: str, idempotent: bool, max_record_bytes: int
) -> AIOKafkaProducer:
    producer = clients.producer(
        kafka,
        role,
        acks="all",
        enable_idempotence=idempotent,
        linger_ms=5,
        max_batch_size=min(256 * 1024, max_record_bytes),
        # A record larger than the topic takes is refused here, before it reaches the broker.
        max_request_size=max_record_bytes,
    )
    try:
        await producer.start()  # an idempotent producer gets its producer id here
    except BaseException:
        await producer.stop()
        raise
    return producer


class BatchProducer:
    """A started producer (acks=all) for closed record batches."""

    def __init__(self, producer: AIOKafkaProducer, idempotent: bool) -> None:
        self._producer = producer
        self.idempotent = idempotent
        self._stopped = False

    @classmethod
    async def start(
        cls, kafka: KafkaSettings, role: str, *, try_idempotent: bool, max_record_bytes: int
    ) -> BatchProducer:
        """A started producer that refuses records over `max_record_bytes`; idempotent when
        asked for, allowed by the settings and offered by the broker."""
        if try_idempotent and kafka.idempotence:
            try:
                return cls(await _started(kafka, role, True, max_record_bytes), True)
            except Exception as exc:
                if not idempotence_unsupported(exc):
                    raise
        return cls(await _started(kafka, role, False, max_record_bytes), False)

    async def queue(
        self,
        topic: str,
        records: Iterable[OutgoingRecord],
        partitioner: Partitioner,
        max_bytes: int,
        on_settled: Callable[[asyncio.Future[Any]], None],
    ) -> Queued:
        """Queue records in order as closed batches (keel_stream.kafka.batching.queue_records)."""
        return await queue_records(
            self._producer, topic, records, partitioner, max_bytes, on_settled
        )

    def stop_sending(self, error: BaseException) -> None:
        """End the producer's sender (it lets the requests in flight finish, and takes no new
        batch) and fail every batch it still holds with `error`. aiokafka 0.14 has no public way
        to do this; it is pinned, and tests/integration/test_relay_exactly_once.py covers this
        path."""
        if self._stopped:
            return
        self._stopped = True
        producer = self._producer
        sender = producer._sender.sender_task
        if sender is not None and not sender.done():
            sender.cancel()
        accumulator = producer._message_accumulator
        held = [b for queue in accumulator._batches.values() for b in queue]
        held += list(accumulator._pending_batches)
        accumulator.fail_all(error)
        for batch in held:  # nobody waits on them any more: keep asyncio from reporting them
            _retrieved(batch._drain_waiter)

    async def _sender_finished(self) -> None:
        """Wait (within a bound) for the ended sender's requests in flight to come back."""
        sender = self._producer._sender.sender_task
        if sender is not None and not sender.done():
            await asyncio.wait([sender], timeout=_STOP_TIMEOUT_S)
        if sender is not None:
            _retrieved(sender)  # it may end with the error of a retry that found its batch failed

    async def close(self) -> None:
        """Stop the producer (after its sender, if it was stopped, finished); if that fails or
        takes too long, close its connections."""
        try:
            if self._stopped:
                await self._sender_finished()
            await asyncio.wait_for(self._producer.stop(), _STOP_TIMEOUT_S)
        except BaseException:
            with contextlib.suppress(Exception):
                await self._producer.client.close()
            raise
