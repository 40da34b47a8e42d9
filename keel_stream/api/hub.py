"""Live signals for SSE streams, fanned out per api process.

Two sources, either enough on its own: PostgreSQL `NOTIFY keel_commits` (every commit, so
streams stay live when Kafka is unreachable) and the frames on keel.sse.v1 (plus keel.partials.v1
for streams that asked for partials). Streams treat both as hints and de-duplicate and gap-fill
by seq against the ledger, so a lost, late or repeated signal never skips or repeats an event.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from aiokafka import AIOKafkaConsumer

from keel_stream.backoff import Backoff
from keel_stream.kafka.partitions import topic_partitions
from keel_stream.logs import get_logger
from keel_stream.store.connect import Pool
from keel_stream.store.notifications import Listener
from keel_stream.topics.catalog import PARTIALS, SSE

__all__ = ["Frame", "LiveHub", "Partial", "Subscription", "Subscriptions", "Wake"]

Key = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Wake:
    seq: int


@dataclass(frozen=True, slots=True)
class Frame:
    seq: int
    kind: str
    data: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Partial:
    data: dict[str, Any]


@dataclass(eq=False)
class Subscription:
    key: Key
    partials: bool
    queue: asyncio.Queue[Wake | Frame | Partial] = field(
        default_factory=lambda: asyncio.Queue(maxsize=10_000)
    )

    def offer(self, item: Wake | Frame | Partial) -> None:
        # A full queue drops the hint; the stream still catches up from the ledger by seq.
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(item)


class Subscriptions(Protocol):
    """Where a stream gets its live signals (the LiveHub; a test's own source)."""

    def subscribe(self, tenant: str, session: str, partials: bool) -> Subscription: ...
    def unsubscribe(self, subscription: Subscription) -> None: ...


class LiveHub:
    def __init__(self, pool: Pool, bootstrap: str | None, topic_prefix: str = "") -> None:
        # NOTIFY keel_commits: every commit, so streams stay live when Kafka is unreachable;
        # a lost LISTEN connection is listened again (streams catch up on every heartbeat).
        self._listener = Listener(pool, "keel_commits", self._on_commit)
        self._bootstrap = bootstrap
        self._sse_topic = SSE.full_name(topic_prefix)
        self._partials_topic = PARTIALS.full_name(topic_prefix)
        self._subscriptions: dict[Key, set[Subscription]] = {}
        self._kafka_task: asyncio.Task[None] | None = None
        self._log = get_logger("api.hub")
        self.kafka_connected = False
        self.partials_live = False
        """The consumer is connected and reads keel.partials.v1: partial frames can flow."""

    async def start(self) -> None:
        await self._listener.start()
        if self._bootstrap:
            self._kafka_task = asyncio.create_task(self._consume())

    async def stop(self) -> None:
        if self._kafka_task is not None:
            self._kafka_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._kafka_task
            self.kafka_connected = self.partials_live = False
        await self._listener.stop()

    def subscribe(self, tenant: str, session: str, partials: bool) -> Subscription:
        subscription = Subscription((tenant, session), partials)
        self._subscriptions.setdefault(subscription.key, set()).add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        subscribers = self._subscriptions.get(subscription.key)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._subscriptions[subscription.key]

    @property
    def streams(self) -> int:
        return sum(len(s) for s in self._subscriptions.values())

    def _on_commit(self, payload: str) -> None:
        tenant, session, seq = payload.rsplit("/", 2)
        for subscription in self._subscriptions.get((tenant, session), ()):
            subscription.offer(Wake(int(seq)))

    def _dispatch(self, topic: str, value: bytes) -> None:
        data = orjson.loads(value)
        key = (data.get("tenant"), data.get("session"))
        for subscription in self._subscriptions.get(key, ()):
            if topic == self._sse_topic:
                subscription.offer(Frame(int(data["id"]), str(data["event"]), data["data"]))
            elif subscription.partials:
                subscription.offer(Partial(data))

    async def _consume(self) -> None:
        backoff = Backoff(0.5, 10.0)
        bootstrap = self._bootstrap
        assert bootstrap is not None  # started only with a broker
        while True:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=bootstrap, fetch_max_wait_ms=20, request_timeout_ms=10_000
            )
            try:
                await consumer.start()
                topics = (self._sse_topic, self._partials_topic)
                partitions = await topic_partitions(bootstrap, topics)
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
