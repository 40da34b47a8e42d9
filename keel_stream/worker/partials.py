"""Token partials to keel.partials.v1: best effort, never in the ledger, never blocking the loop."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from keel_stream.kafka import clients
from keel_stream.kafka.records import record_key
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.logs import get_logger
from keel_stream.topics.records import PartialFrame

__all__ = ["PartialsPublisher"]

_SEND_WAIT_S = 0.05


class PartialsPublisher:
    """Sends partial frames without waiting for acknowledgements; drops them if the broker is
    away (a client that misses partials still gets the committed message with its seq)."""

    def __init__(self, kafka: KafkaSettings | None, topic: str) -> None:
        self._kafka = kafka
        self._topic = topic
        self._producer: clients.Producer | None = None
        self._log = get_logger("partials")

    async def start(self) -> None:
        if self._kafka is None:
            return
        producer = clients.producer(self._kafka, "partials", acks=1, linger_ms=5)
        try:
            await asyncio.wait_for(producer.start(), 10)
        except Exception as exc:  # noqa: BLE001 - partials are optional
            self._log.warning("partials disabled: broker unavailable", error=repr(exc))
            with contextlib.suppress(Exception):
                await producer.stop()
            return
        self._producer = producer
        try:
            # The topic's metadata now, not at the first send: a send waits at most
            # _SEND_WAIT_S, and a metadata fetch on a busy machine can take longer.
            await asyncio.wait_for(producer.partitions_for(self._topic), 10)
        except Exception as exc:  # noqa: BLE001 - the sends will ask again
            self._log.warning("partials topic not known yet", topic=self._topic, error=repr(exc))

    async def publish(
        self, tenant: str, session: str, generation_id: str, index: int, delta: str
    ) -> None:
        if self._producer is None:
            return
        frame = PartialFrame(
            tenant=tenant,
            session=session,
            generation_id=generation_id,
            index=index,
            delta=delta,
            emitted_at=datetime.now(UTC),
        )
        send = self._producer.send(
            self._topic, value=frame.model_dump_json().encode(), key=record_key(tenant, session)
        )
        # A full buffer (broker away) would make send() wait: drop the partial instead.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(send, _SEND_WAIT_S)

    async def stop(self) -> None:
        if self._producer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._producer.stop(), 10)
            self._producer = None
