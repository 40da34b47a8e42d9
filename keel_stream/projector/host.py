"""The live path: a Faust worker folding keel.events.v1 into the read models in PostgreSQL.

Faust consumes and schedules; the read models and their source offsets live in PostgreSQL, so
no Faust table or changelog is the source of anything. On every partition assignment the
consumer is moved to the offsets stored with the states (`perform_seek`), not to the group's
committed offsets alone. Records are applied in batches, one transaction each; a periodic
reconcile heals sessions whose tail never arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import faust
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2
from faust.transport.drivers.aiokafka import Consumer as AIOKafkaFaustConsumer
from faust.transport.drivers.aiokafka import Transport as AIOKafkaTransport

from keel_stream.kafka.records import record_key
from keel_stream.logs import get_logger
from keel_stream.projector.applier import Applier, live_generations
from keel_stream.projector.events import LedgerEvent, SourceRecord
from keel_stream.projector.reconcile import reconcile
from keel_stream.relay.backoff import Backoff
from keel_stream.store.connect import create_pool
from keel_stream.store.sqlfiles import query
from projections import ALL
from projections.sse import render_frame
from topics.admin import apply_catalog
from topics.catalog import EVENTS, SSE

__all__ = ["HostConfig", "build_app", "run_worker"]


@dataclass(frozen=True)
class HostConfig:
    database_url: str
    bootstrap: str
    topic_prefix: str = ""
    data_dir: Path = Path(".keel")
    batch_size: int = 500
    batch_within_s: float = 0.05
    reconcile_every_s: float = 2.0
    reconcile_idle_s: float = 2.0
    app_id: str = field(default="")

    @property
    def group(self) -> str:
        return self.app_id or f"{self.topic_prefix}keel-projections"


class _Runtime:
    """What the agent, the timer and the consumer share: connections, producer, a lock."""

    def __init__(self, config: HostConfig) -> None:
        self.config = config
        self.source = EVENTS.full_name(config.topic_prefix)
        self.sse_topic = SSE.full_name(config.topic_prefix)
        self.lock = asyncio.Lock()
        self.log = get_logger("projector")
        self._pool: asyncpg.Pool | None = None
        self._producer: AIOKafkaProducer | None = None
        self._ready = asyncio.Lock()
        self.partitions = EVENTS.partitions
        self.resumed: set[int] = set()
        """Partitions that delivered a record since the last assignment."""
        self.applier = Applier(ALL, self.source, self._publish_frames)

    async def pool(self) -> asyncpg.Pool:
        async with self._ready:
            if self._pool is None:
                self._pool = await create_pool(self.config.database_url, min_size=1, max_size=4)
            return self._pool

    async def producer(self) -> AIOKafkaProducer:
        async with self._ready:
            if self._producer is None:
                producer = AIOKafkaProducer(
                    bootstrap_servers=self.config.bootstrap, acks="all", linger_ms=2
                )
                await producer.start()
                self._producer = producer
            return self._producer

    async def _publish_frames(self, events: Sequence[LedgerEvent]) -> None:
        producer = await self.producer()
        futures = []
        for event in events:
            frame = render_frame(event, event.committed_at)
            futures.append(
                await producer.send(
                    self.sse_topic,
                    value=frame.model_dump_json().encode(),
                    key=record_key(event.tenant, event.session),
                    headers=[("seq", str(event.seq).encode()), ("kind", event.kind.encode())],
                )
            )
        await asyncio.gather(*futures)

    async def stored_offsets(self) -> dict[int, int]:
        """Per partition, the lowest next offset stored by any live projection."""
        pool = await self.pool()
        async with pool.acquire() as conn:
            live = await live_generations(conn)
            per_projection = []
            for name, generation in live.items():
                rows = await conn.fetch(query("projection_offsets"), name, generation, self.source)
                per_projection.append({r["partition"]: r["next_offset"] for r in rows})
        partitions = set().union(*per_projection) if per_projection else set()
        return {p: min(o.get(p, 0) for o in per_projection) for p in partitions}

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
        if self._pool is not None:
            await self._pool.close()

    def owns(self, assigned: set[int]) -> Any:
        def owns_session(tenant: str, session: str) -> bool:
            index = (murmur2(record_key(tenant, session)) & 0x7FFFFFFF) % self.partitions
            return index in assigned

        return owns_session


def _transport(runtime: _Runtime, app: faust.App) -> AIOKafkaTransport:
    """Faust's aiokafka transport with a consumer that seeks to the stored offsets."""

    class StoredOffsetConsumer(AIOKafkaFaustConsumer):
        """Resumes each source partition from the offset stored with the read models."""

        async def perform_seek(self) -> None:
            await super().perform_seek()
            stored = await runtime.stored_offsets()
            for tp in self.assignment():
                if tp.topic == runtime.source:
                    await self.seek(tp, stored.get(tp.partition, 0))
            runtime.resumed.clear()
            runtime.log.info("resumed from stored offsets", offsets=stored)

    class StoredOffsetTransport(AIOKafkaTransport):
        Consumer = StoredOffsetConsumer

    return StoredOffsetTransport(app.conf.broker_consumer, app)


def build_app(config: HostConfig) -> faust.App:
    """The Faust app: one agent over the source topic, one reconcile timer."""
    runtime = _Runtime(config)
    datadir = config.data_dir / "faust"
    datadir.mkdir(parents=True, exist_ok=True)  # Faust does not create it
    app = faust.App(
        config.group,
        broker=f"kafka://{config.bootstrap}",
        store="memory://",
        datadir=str(datadir),
        web_enabled=False,
        topic_disable_leader=True,
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=10,
        broker_heartbeat_interval=1,
        broker_rebalance_timeout=20,
        broker_commit_every=500,
        stream_wait_empty=False,
    )
    app.transport = _transport(runtime, app)
    source = app.topic(runtime.source, value_serializer="raw", key_serializer="raw")

    @app.agent(source)
    async def fold_events(stream: faust.StreamT[bytes]) -> None:
        assert isinstance(stream, faust.Stream)  # take_events is not on the StreamT protocol
        async for batch in stream.take_events(config.batch_size, within=config.batch_within_s):
            records = [
                SourceRecord(
                    LedgerEvent.from_record(e.message.value),
                    e.message.partition,
                    e.message.offset,
                )
                for e in batch
                if e.message.value is not None
            ]
            for record in records:
                if record.partition not in runtime.resumed:
                    runtime.resumed.add(record.partition)
                    runtime.log.info(
                        "first record", partition=record.partition, offset=record.offset
                    )
            await _apply_until_done(runtime, records)

    @app.timer(interval=config.reconcile_every_s)  # type: ignore[untyped-decorator]
    async def heal_tails() -> None:
        assigned = {tp.partition for tp in app.consumer.assignment() if tp.topic == runtime.source}
        if not assigned:
            return
        async with runtime.lock:
            pool = await runtime.pool()
            try:
                async with pool.acquire() as conn:
                    result = await reconcile(
                        conn,
                        runtime.applier,
                        ALL,
                        idle_s=config.reconcile_idle_s,
                        owns=runtime.owns(assigned),
                    )
            except Exception as exc:  # noqa: BLE001 - the next tick tries again
                runtime.log.warning("reconcile failed", error=repr(exc))
                return
            if result.applied:
                runtime.log.info("reconciled", applied=result.applied)

    async def release(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        await runtime.close()

    app.on_before_shutdown.connect(release)

    return app


async def _apply_until_done(runtime: _Runtime, records: list[SourceRecord]) -> None:
    """Apply a batch; on failure back off and try the same batch again (never skip it)."""
    backoff = Backoff(0.2, 5.0)
    while True:
        try:
            async with runtime.lock:
                pool = await runtime.pool()
                async with pool.acquire() as conn:
                    result = await runtime.applier.apply(conn, records)
            if result.gap_filled:
                runtime.log.info("gap filled from the ledger", events=result.gap_filled)
            return
        except Exception as exc:  # noqa: BLE001 - transient trouble: retry the batch
            runtime.log.warning("batch failed; retrying", error=repr(exc))
            await asyncio.sleep(backoff.next_delay())


def run_worker(config: HostConfig) -> None:
    """Run the Faust worker in this process until SIGINT/SIGTERM."""
    asyncio.run(apply_catalog(config.bootstrap, config.topic_prefix))
    logging.getLogger("faust").setLevel(logging.WARNING)
    app = build_app(config)
    worker = faust.Worker(app, loglevel="WARNING", quiet=True, redirect_stdouts=False)
    with contextlib.suppress(SystemExit):
        worker.execute_from_commandline()
