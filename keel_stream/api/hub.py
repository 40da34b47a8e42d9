"""Live signals for SSE streams, fanned out per api process (keel_stream.api.fanout).

Two sources, either enough on its own: PostgreSQL `NOTIFY keel_commits` (every commit, so
streams stay live when Kafka is unreachable) and the frames on keel.sse.v1 (plus keel.partials.v1
for streams that asked for partials). Both are hints: the feeds and the streams check them by seq
against the ledger, so a lost, late or repeated signal never skips or repeats an event.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

import orjson

from keel_stream.api.fanout import Fanout, Frame, Partial, RangeReads, Signal, Subscription, Wake
from keel_stream.kafka import clients
from keel_stream.kafka.partitions import topic_partitions
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.logs import get_logger
from keel_stream.retry import Backoff
from keel_stream.store.backend import Database
from keel_stream.topics.catalog import PARTIALS, SSE

__all__ = ["Frame", "LiveHub", "Partial", "Signal", "Subscription", "Subscriptions", "Wake"]


class Subscriptions(Protocol):
    """Where a stream gets its live signals (the LiveHub; a test's own source)."""

    def subscribe(self, tenant: str, session: str, partials: bool) -> Subscription: ...
    def unsubscribe(self, subscription: Subscription) -> None: ...


class LiveHub:
    def __init__(
        self, store: Database, kafka: KafkaSettings | None, topic_prefix: str = ""
    ) -> None:
        # NOTIFY keel_commits: every commit, so streams stay live when Kafka is unreachable;
        # a lost LISTEN connection is listened again (streams catch up on every heartbeat).
        self._listener = store.listener("keel_commits", self._on_commit)
        self._fanout = Fanout(RangeReads(store.projections()))
        self._kafka = kafka
        self._sse_topic = SSE.full_name(topic_prefix)
        self._partials_topic = PARTIALS.full_name(topic_prefix)
        self._kafka_task: asyncio.Task[None] | None = None
        self._log = get_logger("api.hub")
        self.kafka_connected = False
        self.partials_live = False
        """The consumer is connected and reads keel.partials.v1: partial frames can flow."""

    async def start(self) -> None:
        await self._listener.start()
        if self._kafka is not None:
            self._kafka_task = asyncio.create_task(self._consume())

    async def stop(self) -> None:
        if self._kafka_task is not None:
            self._kafka_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._kafka_task
            self.kafka_connected = self.partials_live = False
        await self._listener.stop()
        await self._fanout.close()

    def subscribe(self, tenant: str, session: str, partials: bool) -> Subscription:
        return self._fanout.subscribe(tenant, session, partials)

    def unsubscribe(self, subscription: Subscription) -> None:
        self._fanout.unsubscribe(subscription)

    @property
    def streams(self) -> int:
        return self._fanout.streams

    def _on_commit(self, payload: str) -> None:
        tenant, session, seq = payload.rsplit("/", 2)
        self._fanout.wake((tenant, session), int(seq))

    def _dispatch(self, topic: str, value: bytes) -> None:
        data = orjson.loads(value)
        key = (data.get("tenant"), data.get("session"))
        if not self._fanout.watches(key):
            return
        if topic == self._sse_topic:
            self._fanout.frame(key, int(data["id"]), str(data["event"]), data["data"])
        else:
            self._fanout.partial(key, data)

    async def _consume(self) -> None:
        backoff = Backoff(0.5, 10.0)
        kafka = self._kafka
        assert kafka is not None  # started only with a broker
        while True:
            consumer = clients.consumer(kafka, "api", fetch_max_wait_ms=20)
            try:
                await consumer.start()
                topics = (self._sse_topic, self._partials_topic)
                partitions = await topic_partitions(kafka, topics)
                if not partitions:
                    raise RuntimeError("the sse and partials topics do not exist yet")
                consumer.assign(partitions)
                await consumer.seek_to_end(*partitions)
                self.kafka_connected = True
                self.partials_live = any(tp.topic == self._partials_topic for tp in partitions)
                backoff.reset()
                while True:
                    for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                        for record in records:
                            if record.value is not None:
                                self._dispatch(tp.topic, record.value)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - live frames fall back to NOTIFY meanwhile
                self.kafka_connected = self.partials_live = False
                self._log.warning("kafka live source unavailable", error=repr(exc))
                await asyncio.sleep(backoff.next_delay())
            finally:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(consumer.stop(), 5)
