"""The live path: a Faust worker folding keel.events.v1 into the read models in PostgreSQL.

Faust consumes and schedules; the read models and their source offsets live in PostgreSQL, so
no Faust table or changelog is the source of anything. On every partition assignment the
consumer is moved to the offsets stored with the states (`perform_seek`), not to the group's
committed offsets alone. Records are applied in batches, one transaction each; a periodic
reconcile heals sessions whose tail never arrived.

A batch that fails is applied again (never skipped) while the failure is transient, within the
retry policy's bound; any other failure, or one past the bound, crashes the worker: it exits
non-zero and its supervisor sees why, rather than the partition stalling behind a batch that
can never apply.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

import faust
import structlog
from faust.exceptions import ConsumerNotStarted
from mode.supervisors import CrashingSupervisor

from keel_stream.errors import BrokerUnavailable
from keel_stream.kafka import clients
from keel_stream.kafka.admin import apply_catalog
from keel_stream.kafka.errors import kafka_translated
from keel_stream.kafka.faust_app import faust_broker, stored_offset_transport
from keel_stream.kafka.partitions import key_partition
from keel_stream.kafka.records import record_key
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.logs import get_logger, route_stdlib_logging
from keel_stream.metrics import Component, declare, serve_metrics
from keel_stream.projections import ALL
from keel_stream.projections.sse import frame_json
from keel_stream.projector.applier import Applier, BatchResult
from keel_stream.projector.events import SourceEvent, SourceRecord, Undecodable, decode
from keel_stream.projector.metrics import BATCH_LATENCY, AppliedTally, forget_lag, set_lag
from keel_stream.projector.reconcile import Sweep, find_behind, heal
from keel_stream.relay.retry import relay_retry
from keel_stream.retry import Retrying, RetryPolicy, retrying
from keel_stream.store import Store, open_store
from keel_stream.store.projection_state import ProjectionStore
from keel_stream.topics.catalog import EVENTS, SSE

__all__ = ["HostConfig", "build_app", "run_worker"]

_LAG_EVERY_S: Final = 1.0
_REBALANCE_TIMEOUT_S: Final = 20.0
_CRASH_STOP_S: Final = 20.0
STARTUP_PATIENCE_S: Final = 60.0
"""How long the worker waits at start for a broker that does not answer yet."""
_log = get_logger("projector")


@dataclass(frozen=True)
class HostConfig:
    database_url: str
    kafka: KafkaSettings
    topic_prefix: str = ""
    data_dir: Path = Path(".keel")
    batch_size: int = 500
    batch_within_s: float = 0.05
    reconcile_every_s: float = 2.0
    reconcile_idle_s: float = 2.0
    app_id: str = field(default="")
    retry: RetryPolicy = field(default_factory=relay_retry)
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    """Serve Prometheus metrics on metrics_host:metrics_port; None: not served."""

    @property
    def group(self) -> str:
        return self.app_id or f"{self.topic_prefix}keel-projections"


class _Runtime:
    """What the agent, the timer and the consumer share: the store, producer, a lock."""

    def __init__(self, config: HostConfig) -> None:
        self.config = config
        self.source = EVENTS.full_name(config.topic_prefix)
        self.sse_topic = SSE.full_name(config.topic_prefix)
        self.lock = asyncio.Lock()
        self.log = get_logger("projector")
        self._backend: Store | None = None
        self._store: ProjectionStore | None = None
        self._applier: Applier | None = None
        self._producer: clients.Producer | None = None
        self._ready = asyncio.Lock()
        self.partitions = EVENTS.partitions
        self.resumed: set[int] = set()
        """Partitions that delivered a record since the last assignment."""
        self.reconcile_failures = Retrying(config.retry, self.log)
        self.sweep = Sweep()
        self.tally = AppliedTally()
        self.positions: dict[int, int] = {}
        """Per assigned source partition, the next offset to apply (for the lag)."""
        self.behind: set[int] = set()
        """Partitions whose high water is past their position (as of the last measure_lag)."""
        self.applied_at: dict[int, float] = {}
        """Per partition, when the stream last applied records of it (monotonic)."""

    async def store(self) -> ProjectionStore:
        async with self._ready:
            if self._store is None:
                self._backend = await open_store(self.config.database_url, max_size=4)
                self._store = self._backend.projections()
            return self._store

    async def applier(self) -> Applier:
        store = await self.store()
        if self._applier is None:
            self._applier = Applier(store, self.tally.wrap(ALL), self.source, self._publish_frames)
        return self._applier

    async def producer(self) -> clients.Producer:
        async with self._ready:
            if self._producer is None:
                producer = clients.producer(
                    self.config.kafka,
                    "projector",
                    acks="all",
                    linger_ms=2,
                    max_request_size=SSE.max_message_bytes,
                )
                try:
                    await producer.start()
                except BaseException:
                    await producer.stop()
                    raise
                self._producer = producer
            return self._producer

    async def _publish_frames(self, events: Sequence[SourceEvent]) -> None:
        async with kafka_translated("publish sse frames"):
            producer = await self.producer()
            futures = []
            for event in events:
                futures.append(
                    await producer.send(
                        self.sse_topic,
                        value=frame_json(event, event.committed_at),
                        key=record_key(event.tenant, event.session),
                        headers=[("seq", str(event.seq).encode()), ("kind", event.kind.encode())],
                    )
                )
            await asyncio.gather(*futures)

    async def apply(self, records: Sequence[SourceRecord | Undecodable]) -> BatchResult:
        async with self.lock:
            began = time.monotonic()
            with self.tally.batch():
                result = await (await self.applier()).apply(records)
            BATCH_LATENCY.observe(time.monotonic() - began)
        for record in records:
            self.positions[record.partition] = max(
                self.positions.get(record.partition, 0), record.offset + 1
            )
            self.applied_at[record.partition] = time.monotonic()
        return result

    def measure_lag(self, consumer: faust.types.ConsumerT) -> None:
        """Set the lag of each assigned source partition the consumer knows a high water of."""
        highwaters: dict[int, int | None] = {}
        for tp in consumer.assignment():
            if tp.topic == self.source and tp.partition in self.positions:
                try:
                    highwaters[tp.partition] = consumer.highwater(tp)
                except (AssertionError, ConsumerNotStarted):  # revoked meanwhile, or stopping
                    continue
        set_lag(self.source, self.positions, highwaters)
        self.behind = {p for p, high in highwaters.items() if high and high > self.positions[p]}

    def note_first_records(self, records: Sequence[SourceRecord | Undecodable]) -> None:
        """Logs where the stream resumed each partition, once per partition."""
        for record in records:
            if record.partition not in self.resumed:
                self.resumed.add(record.partition)
                self.log.info("first record", partition=record.partition, offset=record.offset)

    def streaming(self) -> set[int]:
        """Partitions behind their high water that the stream is applying (it applied records of
        them within two reconcile ticks): what reconcile finds missing there is on its way, and
        healing it from the ledger too would only apply it twice."""
        recent = time.monotonic() - 2 * self.config.reconcile_every_s
        return {p for p in self.behind if self.applied_at.get(p, 0.0) > recent}

    async def stored_offsets(self) -> dict[int, int]:
        """Per partition, the lowest next offset stored by any live projection."""
        store = await self.store()
        live = await store.live_generations()
        per_projection = [
            await store.offsets(name, generation, self.source) for name, generation in live.items()
        ]
        partitions = set().union(*per_projection) if per_projection else set()
        return {p: min(o.get(p, 0) for o in per_projection) for p in partitions}

    async def close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
        if self._backend is not None:
            await self._backend.close()

    def owns(self, assigned: set[int]) -> Callable[[str, str], bool]:
        def owns_session(tenant: str, session: str) -> bool:
            return key_partition(record_key(tenant, session), self.partitions) in assigned

        return owns_session


def _transport(runtime: _Runtime, app: faust.App) -> faust.types.TransportT:
    """Faust's transport, with a consumer that seeks to the offsets stored with the models."""

    async def stored() -> dict[int, int]:
        return await retrying(
            runtime.stored_offsets, "read stored offsets", runtime.config.retry, runtime.log
        )

    def resumed(offsets: dict[int, int], assigned: set[int]) -> None:
        forget_lag(runtime.source, set(runtime.positions) - assigned)
        runtime.positions = {p: offsets.get(p, 0) for p in assigned}
        runtime.resumed.clear()
        runtime.log.info(
            "resumed from stored offsets", offsets=offsets, partitions=sorted(assigned)
        )

    return stored_offset_transport(app, runtime.source, stored, resumed)


def _records(batch: Sequence[faust.EventT[bytes]]) -> list[SourceRecord | Undecodable]:
    """The batch's records as events; a record that is not one is kept as an Undecodable (the
    applier stores it as a dead record and passes over it) instead of crashing the worker."""
    return [
        decode(e.message.value, e.message.partition, e.message.offset)
        for e in batch
        if e.message.value is not None
    ]


def build_app(config: HostConfig) -> faust.App:
    """The Faust app: one agent over the source topic, one reconcile timer."""
    runtime = _Runtime(config)
    datadir = config.data_dir / "faust"
    datadir.mkdir(parents=True, exist_ok=True)  # Faust does not create it
    app = faust.App(
        config.group,
        store="memory://",
        datadir=str(datadir),
        web_enabled=False,
        topic_disable_leader=True,
        topic_allow_declare=False,
        consumer_auto_offset_reset="earliest",
        broker_commit_every=500,
        stream_wait_empty=False,
        **faust_broker(config.kafka, "projector", rebalance_timeout_s=_REBALANCE_TIMEOUT_S),
    )
    app.transport = _transport(runtime, app)
    source = app.topic(runtime.source, value_serializer="raw", key_serializer="raw")

    # A crashing supervisor: an agent that raises takes the worker down (exit status 1) instead
    # of being restarted past the batch it could not apply.
    @app.agent(source, supervisor_strategy=CrashingSupervisor)
    async def fold_events(stream: faust.StreamT[bytes]) -> None:
        if not isinstance(stream, faust.Stream):  # take_events is not on the StreamT protocol
            raise TypeError(f"expected a faust.Stream, got {type(stream).__name__}")
        async for batch in stream.take_events(config.batch_size, within=config.batch_within_s):
            records = _records(batch)
            runtime.note_first_records(records)
            try:
                result = await retrying(
                    partial(runtime.apply, records), "apply batch", config.retry, runtime.log
                )
            except Exception:
                _exit_unless_stopped_within(_CRASH_STOP_S, runtime.log)
                raise
            if result.gap_filled:
                runtime.log.info("gap filled from the ledger", events=result.gap_filled)
            runtime.measure_lag(app.consumer)

    @app.timer(interval=_LAG_EVERY_S)  # type: ignore[untyped-decorator]
    async def measure_lag() -> None:
        runtime.measure_lag(app.consumer)

    @app.timer(interval=config.reconcile_every_s)  # type: ignore[untyped-decorator]
    async def heal_tails() -> None:
        assigned = {tp.partition for tp in app.consumer.assignment() if tp.topic == runtime.source}
        assigned -= runtime.streaming()
        if assigned:
            await _reconcile(runtime, assigned)

    async def release(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
        await runtime.close()

    app.on_before_shutdown.connect(release)

    return app


async def _reconcile(runtime: _Runtime, assigned: set[int]) -> None:
    """One reconcile pass. A transient failure waits for the next tick (within the retry
    bound); any other failure raises, which crashes the worker."""
    try:
        store, applier = await runtime.store(), await runtime.applier()
        # Looking takes no lock (heal locks the states it writes and never moves one backwards,
        # so a finding that went stale meanwhile is harmless): only healing waits for batches.
        behind = await find_behind(
            store,
            ALL,
            idle_s=runtime.config.reconcile_idle_s,
            sweep=runtime.sweep,
            owns=runtime.owns(assigned),
        )
        async with runtime.lock:
            with runtime.tally.batch():
                result = await heal(store, applier, behind)
    except Exception as exc:  # noqa: BLE001 - classified in delay_after, which re-raises
        runtime.reconcile_failures.delay_after(exc, "reconcile")
        return
    runtime.reconcile_failures.succeeded()
    if result.applied:
        runtime.log.info("reconciled", applied=result.applied)


async def _apply_topics(config: HostConfig, patience_s: float = STARTUP_PATIENCE_S) -> None:
    """Apply the topic catalog, waiting (with backoff) for a broker that is not up yet; past
    `patience_s`, BrokerUnavailable (the CLI prints it as one line)."""

    async def apply() -> None:
        async with kafka_translated("apply topics"):
            await apply_catalog(config.kafka, config.topic_prefix)

    await retrying(apply, "apply topics", _broker_patience(patience_s), _log)


def _broker_patience(patience_s: float) -> RetryPolicy:
    # Only an unreachable broker is waited for; any other refusal is raised at once.
    return RetryPolicy(
        deadline_s=patience_s,
        initial_s=0.5,
        retriable=lambda exc: isinstance(exc, BrokerUnavailable),
    )


def _exit_unless_stopped_within(seconds: float, log: structlog.stdlib.BoundLogger) -> None:
    """Arm a deadline on the crash that follows: Faust's stop after an agent's crash waits on
    its consumer and has been seen to hang under load, which would leave the worker alive with
    its partitions stalled. Past the deadline the process exits 1 as the crash would have."""

    def exit_now() -> None:
        log.critical("the crash did not stop the worker in time; exiting", deadline_s=seconds)
        logging.shutdown()
        os._exit(1)

    timer = threading.Timer(seconds, exit_now)
    timer.daemon = True
    timer.start()


def run_worker(config: HostConfig) -> None:
    """Run the Faust worker in this process until SIGINT/SIGTERM; exits non-zero on a crash."""
    asyncio.run(_apply_topics(config))
    logging.getLogger("faust").setLevel(logging.WARNING)
    # Faust's own logging setup (colored lines on stdout) stays off: its loggers, and the Kafka
    # client's, write our structured lines on stderr.
    route_stdlib_logging(clients.CLIENT_LOGGER)
    declare(Component.PROJECTOR)
    if config.metrics_port is not None:
        serve_metrics(config.metrics_host, config.metrics_port)
    app = build_app(config)
    worker = faust.Worker(
        app, loglevel="WARNING", quiet=True, redirect_stdouts=False, override_logging=False
    )
    worker.spinner = None  # it writes cursor codes to stdout, a terminal or not
    # What is loaded by now lives as long as the worker: the cyclic collector need not walk it
    # again on every full pass (those took a tenth of the worker's CPU under load).
    gc.freeze()
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        # It always exits; a clean stop returns to the caller, a crash goes on with its status.
        if exc.code not in (None, 0):
            raise
