"""The outbox relay: publishes committed events to Kafka, in order per session, each once.

One relay per shard is active (it holds the shard's advisory lock on its connection); the others
stand by and try again every poll interval, so one takes over shortly after the active relay's
connection ends. The active relay wakes on NOTIFY, polls as a fallback, publishes batches and
deletes a row only after the broker acknowledged it. When the broker is down, commits go on
succeeding: the backlog waits in PostgreSQL and drains in order when the broker returns.

Batches are pipelined (keel_stream.relay.pipeline): the next batch is fetched, past the rows in
flight, and handed to the producer while up to `batches_in_flight` earlier ones await their
acknowledgements; they are settled (acknowledged rows deleted) in the order they were handed
over. A session's records go to one partition, in order: the producer never reorders a
partition's batches, and its first failed record ends the publisher, so nothing queued behind it
lands (keel_stream.relay.publisher).

Each event reaches the topic once: the producer is idempotent where the broker offers it (a batch
the client retries is not written twice), and every time the relay (re)opens its publisher -- on
becoming active, and after a failed batch -- it first reads the topic's tail and deletes, without
sending them again, the rows found there (published by a relay that died before deleting them,
or by a batch that failed part way). Consumers still de-duplicate by seq: the ledger is the truth.

Failures are retried only when transient (keel_stream.relay.retry), within a bound; anything
else, or a transient failure past the bound, ends `run` with the error. A record the broker
refuses for what it is (too large, invalid) is the exception: it is published as a claim check
that keeps its seq on the topic (keel_stream.relay.refusals), and the relay goes on.

The backlog gauges are refreshed from the outbox every second while the relay is active, whether
or not it can reach the broker, so they tell the truth during a broker outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from keel_stream.errors import StoreError
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.logs import get_logger
from keel_stream.relay import metrics
from keel_stream.relay.accounting import acknowledged_rows, claim_checked, measure_backlog
from keel_stream.relay.heap import freeze_startup_heap
from keel_stream.relay.pipeline import Pipeline
from keel_stream.relay.publisher import Publisher, PublishResult
from keel_stream.relay.refusals import Refusals
from keel_stream.relay.retry import relay_retry
from keel_stream.relay.skip import tail_depth
from keel_stream.retry import Retrying, RetryPolicy
from keel_stream.store.outbox import (
    Outbox,
    OutboxRow,
    PipelinedShard,
    Shard,
    ShardConnection,
)
from keel_stream.store.postgres_store import relay_outbox
from keel_stream.topics.catalog import EVENTS

__all__ = ["Relay", "RelayConfig", "delete_acknowledged"]

_BACKLOG_REFRESH_S = 1.0
_CLOSE_TIMEOUT_S = 30.0  # above Publisher.close's own bounds (abandoning, then stopping)


@dataclass(frozen=True)
class RelayConfig:
    """Where the relay reads and writes, and how."""

    database_url: str
    kafka: KafkaSettings
    topic_prefix: str = ""
    shard: Shard = field(default_factory=Shard)
    batch_size: int = 500
    poll_interval_s: float = 1.0
    relay_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    retry: RetryPolicy = field(default_factory=relay_retry)
    batches_in_flight: int = 3
    """Batches handed to the producer and not yet deleted, at most (1: each batch's
    acknowledgements and delete are awaited before the next is fetched). Over a shard connection
    that cannot fetch past rows in flight (PipelinedShard), 1."""
    tail_depth: int | None = None
    """Records per partition read back from the topic's tail before publishing (0: none, so no
    row is ever skipped); None: batch_size times batches_in_flight times the shard count (see
    relay.skip.tail_depth)."""
    max_record_bytes: int = EVENTS.max_message_bytes
    """The producer refuses a larger record (it goes out as a claim check): the catalog's
    max.message.bytes of the events topic."""


async def delete_acknowledged(
    shard: ShardConnection, rows: Sequence[OutboxRow], result: PublishResult
) -> list[OutboxRow]:
    """Delete from the outbox the rows of a batch the broker acknowledged (the first
    `result.acked`, in outbox order) and return them; the rest stay, to be fetched and sent
    again, from the first of them, in order."""
    acked = acknowledged_rows(rows, result)
    if acked:
        await shard.acknowledge([r.id for r in acked])
    return acked


async def _wait(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


class Relay:
    """Run with `await Relay(outbox, config).run(stop)`; returns when stop is set."""

    def __init__(self, outbox: Outbox, config: RelayConfig) -> None:
        self._outbox = outbox
        self._config = config
        self._topic = EVENTS.full_name(config.topic_prefix)
        self._log = get_logger("relay").bind(relay=config.relay_id, shard=config.shard.index)
        self._idempotent: bool | None = None  # unknown until a broker answered
        self._refusals = Refusals()

    @classmethod
    def from_config(cls, config: RelayConfig) -> Relay:
        """A relay on connections of its own to config.database_url, named after the relay."""
        outbox = relay_outbox(config.database_url, application_name=f"keel-relay:{config.relay_id}")
        return cls(outbox, config)

    async def run(self, stop: asyncio.Event) -> None:
        try:
            await self._serve(stop)
        except Exception as exc:
            self._log.error("relay stopped", error=repr(exc))
            raise

    async def _serve(self, stop: asyncio.Event) -> None:
        database = Retrying(self._config.retry, self._log)
        while not stop.is_set():
            try:
                async with self._outbox.shard(self._config.shard) as shard:
                    if await self._stand_by(shard, stop, database):
                        await self._lead(shard, stop)
            except StoreError as exc:
                # The store failed: stand down (the lock goes with the connection) and retry.
                await _wait(stop, database.delay_after(exc, "outbox"))
            finally:
                metrics.ACTIVE.set(0)

    async def _stand_by(
        self, shard: ShardConnection, stop: asyncio.Event, database: Retrying
    ) -> bool:
        """Wait until this relay holds its shard's lock; False if stopped first."""
        announced = False
        while not stop.is_set():
            leading = await shard.try_lead()
            database.succeeded()
            if leading:
                self._log.info("active")
                metrics.ACTIVE.set(1)
                return True
            if not announced:
                self._log.info("standby")
                announced = True
            await _wait(stop, self._config.poll_interval_s)
        return False

    async def _lead(self, shard: ShardConnection, stop: asyncio.Event) -> None:
        wake = await shard.commit_wake_ups()
        publisher: Publisher | None = None
        pipeline = Pipeline()
        broker = Retrying(self._config.retry, self._log)
        measured = float("-inf")
        more = True  # rows may wait that no wake-up announces: fetch without waiting for one
        try:
            while not stop.is_set():
                if time.monotonic() - measured >= _BACKLOG_REFRESH_S:
                    # Before anything that needs the broker: true during an outage too.
                    await measure_backlog(shard)
                    measured = time.monotonic()
                if publisher is None:
                    # Opened before the first batch needs it, so events wait on no handshake.
                    publisher = await self._open_publisher(broker, stop)
                    if publisher is not None:
                        freeze_startup_heap()
                    more = True
                    continue
                failure = await self._settle(pipeline, broker, wait=False)
                if failure is not None:
                    await self._recover(shard, publisher, pipeline, broker, failure, stop)
                    publisher = None
                    continue
                # Draining a backlog, the next fetch deletes what was acknowledged (one round
                # trip a batch); else it is deleted beside, so no fetch waits for its commit.
                ride = more and isinstance(shard, PipelinedShard)
                if not ride:
                    await self._delete_acknowledged(shard, pipeline)
                room = pipeline.slots_after(delete=ride) < self._slots(shard)
                if room and (more or wake.is_set()):
                    wake.clear()
                    fetched, more = await self._hand_over(shard, publisher, pipeline, ride)
                    if fetched:
                        continue
                if pipeline or not room:
                    await pipeline.wait(wake if room else None)
                    continue
                broker.succeeded()  # nothing pending: no failure is going on
                publisher.tail.forget()  # the outbox held nothing the tail could hold
                await _wait(wake, self._config.poll_interval_s)
                more = True
            if publisher is not None:  # stopping: what is in flight is settled first
                await self._settle(pipeline, broker, wait=True)
                await self._deleted(shard, pipeline)
        finally:
            pipeline.cancel()
            if publisher is not None:
                await self._close(publisher)

    async def _recover(
        self,
        shard: ShardConnection,
        publisher: Publisher,
        pipeline: Pipeline,
        broker: Retrying,
        failure: tuple[BaseException, bool],
        stop: asyncio.Event,
    ) -> None:
        """After a failed batch: delete what was acknowledged before it, wait for the batches
        after it (their rows stay), close the publisher and back off unless it was a refusal."""
        await self._deleted(shard, pipeline)
        await pipeline.abandon()
        await self._close(publisher)
        error, refused = failure
        if not refused:  # a refused record is sent alone or as its claim check next
            await _wait(stop, broker.delay_after(error, "publish"))

    def _slots(self, shard: ShardConnection) -> int:
        """How many batches may be handed over and not deleted now: one while a refused row is
        sorted out."""
        if not isinstance(shard, PipelinedShard) or self._refusals.sorting_out:
            return 1
        return max(1, self._config.batches_in_flight)

    async def _hand_over(
        self, shard: ShardConnection, publisher: Publisher, pipeline: Pipeline, ride: bool
    ) -> tuple[int, bool]:
        """Fetch the next batch, past the ones handed over and not deleted yet (with `ride`,
        deleting the rows acknowledged in the same statement), delete what the topic holds
        already and hand the rest to the publisher; how many rows were fetched, and whether as
        many as asked for (more may be waiting)."""
        limit = self._refusals.batch_size(self._config.batch_size)
        if isinstance(shard, PipelinedShard):
            excluding = pipeline.ids
            deleting = pipeline.to_delete() if ride else []
            rows = await shard.fetch_excluding(limit, excluding, deleting)
        else:
            rows = await shard.fetch(limit)
        if rows and not pipeline:
            self._refusals.fetched(rows[0].id)  # the outbox's first row
        fetched = len(rows)
        found, rows = publisher.tail.split(rows)
        if found:
            await shard.acknowledge([r.id for r in found])
            metrics.SKIPPED.inc(len(found))
            self._log.info("on the topic already; not sent again", rows=len(found))
            self._refusals.published(found)
        if rows:
            claim_check = self._refusals.claim_check_for(rows)
            if claim_check is None:
                pipeline.add(rows, None, publisher.publish(rows))
            else:
                stand_in = publisher.publish_claim_check(rows[0], claim_check)
                pipeline.add(rows, claim_check, stand_in)
        return fetched, fetched >= limit

    async def _delete_acknowledged(self, shard: ShardConnection, pipeline: Pipeline) -> None:
        """Start deleting the rows acknowledged (beside the fetches where the shard connection
        can; else now)."""
        if isinstance(shard, PipelinedShard):
            pipeline.delete_aside(shard.acknowledge_aside)
            return
        ids = pipeline.to_delete()
        if ids:
            await shard.acknowledge(ids)

    async def _deleted(self, shard: ShardConnection, pipeline: Pipeline) -> None:
        """Delete every row acknowledged, and wait until they are deleted."""
        await pipeline.deleted()
        await self._delete_acknowledged(shard, pipeline)
        await pipeline.deleted()

    async def _settle(
        self, pipeline: Pipeline, broker: Retrying, *, wait: bool
    ) -> tuple[BaseException, bool] | None:
        """Settle the batches at the head of the pipeline that have their outcome (with `wait`,
        every batch): their acknowledged rows are to be deleted. If one stopped short, why, and
        whether that was a refusal of the record."""
        while pipeline and (wait or pipeline.oldest_settled):
            batch, result = await pipeline.settle_oldest()
            rows, claim_check = batch.rows, batch.claim_check
            self._log.debug("published", rows=len(rows), acked=result.acked)
            acked = acknowledged_rows(rows, result)
            pipeline.delete_later(acked)
            self._refusals.published(acked)
            if claim_check is not None and acked:
                claim_checked(self._log, acked[0], claim_check)
            if result.error is not None:
                return self._failed(rows, result, len(acked), claim_check is not None)
            broker.succeeded()
        return None

    def _failed(
        self, rows: list[OutboxRow], result: PublishResult, acked: int, claim_check: bool
    ) -> tuple[BaseException, bool]:
        assert result.error is not None
        metrics.FAILURES.inc()
        refused = self._refusals.refused(rows, result.acked, result.error, claim_check=claim_check)
        self._log.warning(
            "record refused; sending it alone" if refused else "publish failed; will resend",
            acked=acked,
            pending=len(rows) - acked,
            error=repr(result.error),
        )
        return result.error, refused

    async def _open_publisher(self, broker: Retrying, stop: asyncio.Event) -> Publisher | None:
        """A connected publisher that has read the topic's tail; None after a transient failure
        (backed off already)."""
        config = self._config
        started = time.monotonic()
        try:
            publisher = await Publisher.open(
                config.kafka,
                self._topic,
                config.topic_prefix,
                try_idempotent=self._idempotent is not False,
                tail_depth=tail_depth(
                    config.batch_size,
                    config.shard.count,
                    config.tail_depth,
                    config.batches_in_flight,
                ),
                max_record_bytes=config.max_record_bytes,
            )
        except Exception as exc:  # noqa: BLE001 - classified in delay_after, which re-raises
            metrics.FAILURES.inc()
            delay = broker.delay_after(exc, "broker connect")
            await _wait(stop, delay)
            return None
        if publisher.idempotent != self._idempotent:
            # Once per process (and again only if a broker answers differently).
            self._idempotent = publisher.idempotent
            metrics.IDEMPOTENT.set(1 if publisher.idempotent else 0)
            self._log.info("producer mode", mode="idempotent" if publisher.idempotent else "plain")
        self._log.info(
            "tail read",
            events=len(publisher.tail),
            sessions=len(publisher.tail.heads),
            seconds=round(time.monotonic() - started, 3),
        )
        return publisher

    async def _close(self, publisher: Publisher) -> None:
        try:
            await asyncio.wait_for(publisher.close(), _CLOSE_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the producer is dropped either way
            # What it could not flush stays in the outbox.
            self._log.warning("closing the producer failed", error=repr(exc))
