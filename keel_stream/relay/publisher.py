"""Publishing outbox rows to keel.events.v1 and telling which of them the broker acknowledged."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer

from keel_stream.kafka.records import EventRecordCodec
from keel_stream.store.outbox import OutboxRow
from keel_stream.topics.admin import apply_catalog

__all__ = ["PublishResult", "Publisher", "acknowledged"]


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


class Publisher:
    """An aiokafka producer (acks=all) for one topic.

    Correctness does not rest on producer idempotence or transactions (not every broker speaks
    them): a row is acknowledged or it is sent again, and consumers de-duplicate by seq.
    """

    def __init__(self, bootstrap: str, topic: str, producer: AIOKafkaProducer) -> None:
        self._bootstrap = bootstrap
        self._topic = topic
        self._producer = producer

    @classmethod
    async def open(cls, bootstrap: str, topic: str, prefix: str) -> Publisher:
        """Make sure the catalog's topics exist, then connect a producer.

        The topics are (re)applied on every open because a broker that lost its data (the
        memory-only dev broker after a restart) would otherwise auto-create them with defaults.
        """
        await apply_catalog(bootstrap, prefix)
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            acks="all",
            linger_ms=5,
            request_timeout_ms=5_000,
            max_batch_size=256 * 1024,
            client_id="keel-relay",
        )
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        return cls(bootstrap, topic, producer)

    async def publish(self, rows: Sequence[OutboxRow]) -> PublishResult:
        """Send rows in order and wait for the acknowledgements."""
        futures: list[asyncio.Future[Any]] = []
        error: BaseException | None = None
        try:
            for row in rows:
                record = EventRecordCodec.encode(
                    row.tenant, row.session, row.seq, row.kind, row.payload, row.committed_at
                )
                futures.append(
                    await self._producer.send(
                        self._topic, value=record.value, key=record.key, headers=record.headers
                    )
                )
        except Exception as exc:  # noqa: BLE001 - a failed send ends the batch; acks count
            error = exc
        return acknowledged(await asyncio.gather(*futures, return_exceptions=True), error)

    async def close(self) -> None:
        await self._producer.stop()
