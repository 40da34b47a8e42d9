"""The outbox relay: publishes committed events to Kafka, in order per session, each once.

One relay per shard is active (it holds the shard's advisory lock on its connection); the others
stand by and try again every poll interval, so one takes over shortly after the active relay's
connection ends. The active relay wakes on NOTIFY, polls as a fallback, publishes batches and
deletes a row only after the broker acknowledged it. When the broker is down, commits go on
succeeding: the backlog waits in PostgreSQL and drains in order when the broker returns.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from structlog.stdlib import BoundLogger

from keel_stream.errors import StoreError
from keel_stream.logs import get_logger
from keel_stream.relay import metrics
from keel_stream.relay.publisher import Publisher, PublishResult
from keel_stream.relay.refusals import Refusals
from keel_stream.relay.retry import Retrying, RetryPolicy
from keel_stream.relay.skip import tail_depth
from keel_stream.store.outbox import Outbox, OutboxRow, PostgresOutbox, Shard, ShardConnection
from keel_stream.topics.catalog import EVENTS

__all__ = ["Relay", "RelayConfig", "delete_acknowledged"]

_BACKLOG_REFRESH_S = 1.0
_CLOSE_TIMEOUT_S = 30.0  # above Publisher.close's own bounds (abandoning, then stopping)


@dataclass(frozen=True)
class RelayConfig:
    """Where the relay reads and writes, and how."""

    database_url: str
    bootstrap: str
    topic_prefix: str = ""
    shard: Shard = field(default_factory=Shard)
    batch_size: int = 500
    poll_interval_s: float = 1.0
    relay_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    tail_depth: int | None = None
    """Records per partition read back from the topic's tail before publishing (0: none, so no
    row is ever skipped); None: batch_size times the shard count (see relay.skip.tail_depth)."""
    max_record_bytes: int = EVENTS.max_message_bytes
    """The producer refuses a larger record (it goes out as a claim check): the catalog's
    max.message.bytes of the events topic."""


async def delete_acknowledged(
    shard: ShardConnection, rows: Sequence[OutboxRow], result: PublishResult
) -> list[OutboxRow]:
    """Delete from the outbox the rows of a batch the broker acknowledged (the first
    `result.acked`, in outbox order) and return them; the rest stay, to be fetched and sent
    again, from the first of them, in order."""
    acked = list(rows[: result.acked])
    if acked:
        await shard.acknowledge([r.id for r in acked])
        now = time.time()
        for row in acked:
            metrics.PUBLISH_LATENCY.observe(max(0.0, now - row.committed_at.timestamp()))
        metrics.PUBLISHED.inc(len(acked))
    return acked


async def _measure_backlog(shard: ShardConnection) -> None:
    backlog = await shard.backlog()
    metrics.BACKLOG.set(backlog.events)
    metrics.OLDEST_AGE.set(backlog.oldest_s)


def _claim_checked(log: BoundLogger, row: OutboxRow, details: Mapping[str, Any]) -> None:
    metrics.CLAIM_CHECKED.inc()
    log.warning(
        "published a claim check in place of a refused event",
        tenant=row.tenant,
        session=row.session,
        seq=row.seq,
        **details,
    )


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
        outbox = PostgresOutbox.connecting(
            config.database_url, application_name=f"keel-relay:{config.relay_id}"
        )
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
        broker = Retrying(self._config.retry, self._log)
        measured = float("-inf")
        try:
            while not stop.is_set():
                if time.monotonic() - measured >= _BACKLOG_REFRESH_S:
                    # Before anything that needs the broker: true during an outage too.
                    await _measure_backlog(shard)
                    measured = time.monotonic()
                if publisher is None:
                    # Opened before the first batch needs it, so events wait on no handshake.
                    publisher = await self._open_publisher(broker, stop)
                    continue
                wake.clear()
                rows = await shard.fetch(self._refusals.batch_size(self._config.batch_size))
                if not rows:
                    broker.succeeded()  # nothing pending: no failure is going on
                    publisher.tail.forget()  # no row left that the tail could hold
                    await _wait(wake, self._config.poll_interval_s)
                    continue
                failure = await self._publish(shard, publisher, rows)
                if failure is None:
                    broker.succeeded()
                    continue
                await self._close(publisher)
                publisher = None
                error, refused = failure
                if not refused:  # a refused record is sent alone or as its claim check next
                    await _wait(stop, broker.delay_after(error, "publish"))
        finally:
            if publisher is not None:
                await self._close(publisher)

    async def _open_publisher(self, broker: Retrying, stop: asyncio.Event) -> Publisher | None:
        """A connected publisher that has read the topic's tail; None after a transient failure
        (backed off already)."""
        config = self._config
        started = time.monotonic()
        try:
            publisher = await Publisher.open(
                config.bootstrap,
                self._topic,
                config.topic_prefix,
                try_idempotent=self._idempotent is not False,
                tail_depth=tail_depth(config.batch_size, config.shard.count, config.tail_depth),
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

    async def _publish(
        self, shard: ShardConnection, publisher: Publisher, rows: list[OutboxRow]
    ) -> tuple[BaseException, bool] | None:
        """Delete what the topic holds already, publish the rest (or a refused row's claim
        check) and delete what was acknowledged; if it stopped short, why, and whether that was
        a refusal of the record."""
        self._refusals.fetched(rows[0].id)
        found, rows = publisher.tail.split(rows)
        if found:
            await shard.acknowledge([r.id for r in found])
            metrics.SKIPPED.inc(len(found))
            self._log.info("on the topic already; not sent again", rows=len(found))
            self._refusals.published(found)
        if not rows:
            return None
        claim_check = self._refusals.claim_check_for(rows)
        if claim_check is None:
            result = await publisher.publish(rows)
        else:
            result = await publisher.publish_claim_check(rows[0], claim_check)
        self._log.debug("published", rows=len(rows), acked=result.acked)
        acked = await delete_acknowledged(shard, rows, result)
        self._refusals.published(acked)
        if claim_check is not None and acked:
            _claim_checked(self._log, acked[0], claim_check)
        if result.error is None:
            return None
        metrics.FAILURES.inc()
        refused = self._refusals.refused(
            rows, result.acked, result.error, claim_check=claim_check is not None
        )
        self._log.warning(
            "record refused; sending it alone" if refused else "publish failed; will resend",
            acked=len(acked),
            pending=len(rows) - len(acked),
            error=repr(result.error),
        )
        return result.error, refused

    async def _close(self, publisher: Publisher) -> None:
        try:
            await asyncio.wait_for(publisher.close(), _CLOSE_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the producer is dropped either way
            # What it could not flush stays in the outbox.
            self._log.warning("closing the producer failed", error=repr(exc))
