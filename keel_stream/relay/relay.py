"""The outbox relay: publishes committed events to Kafka, at least once, in order per session.

One relay per shard is active (it holds the shard's advisory lock on its connection); the others
stand by and try again every poll interval, so one takes over shortly after the active relay's
connection ends. The active relay wakes on NOTIFY, polls as a fallback, publishes batches and
deletes a row only after the broker acknowledged it. When the broker is down, commits go on
succeeding: the backlog waits in PostgreSQL and drains in order when the broker returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from dataclasses import dataclass, field

import asyncpg

from keel_stream.errors import StoreUnavailable
from keel_stream.logs import get_logger
from keel_stream.relay import metrics
from keel_stream.relay.backoff import Backoff
from keel_stream.relay.outbox import Shard
from keel_stream.relay.publisher import OutboxRow, Publisher
from keel_stream.store.connect import connect
from topics.catalog import EVENTS

__all__ = ["Relay", "RelayConfig"]

_BACKLOG_REFRESH_S = 1.0


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


async def _wait(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


class Relay:
    """Run with `await Relay(config).run(stop)`; returns when stop is set."""

    def __init__(self, config: RelayConfig) -> None:
        self._config = config
        self._topic = EVENTS.full_name(config.topic_prefix)
        self._log = get_logger("relay").bind(relay=config.relay_id, shard=config.shard.index)

    async def run(self, stop: asyncio.Event) -> None:
        backoff = Backoff()
        while not stop.is_set():
            try:
                conn = await connect(
                    self._config.database_url,
                    application_name=f"keel-relay:{self._config.relay_id}",
                )
            except StoreUnavailable as exc:
                self._log.warning("database unavailable", error=str(exc))
                await _wait(stop, backoff.next_delay())
                continue
            try:
                if await self._stand_by(conn, stop):
                    backoff.reset()
                    await self._lead(conn, stop)
            except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError) as exc:
                self._log.warning("lost the database; standing down", error=str(exc))
                await _wait(stop, backoff.next_delay())
            finally:
                metrics.ACTIVE.set(0)
                with contextlib.suppress(Exception):
                    await conn.close()

    async def _stand_by(self, conn: asyncpg.Connection, stop: asyncio.Event) -> bool:
        """Wait until this relay holds its shard's lock; False if stopped first."""
        announced = False
        while not stop.is_set():
            if await self._config.shard.try_lead(conn):
                self._log.info("active")
                metrics.ACTIVE.set(1)
                return True
            if not announced:
                self._log.info("standby")
                announced = True
            await _wait(stop, self._config.poll_interval_s)
        return False

    async def _lead(self, conn: asyncpg.Connection, stop: asyncio.Event) -> None:
        wake = asyncio.Event()
        await conn.add_listener("keel_commits", lambda *_: wake.set())
        publisher: Publisher | None = None
        backoff = Backoff()
        last_backlog = 0.0
        try:
            while not stop.is_set():
                if publisher is None:
                    # Opened before the first batch needs it, so events wait on no handshake.
                    publisher = await self._open_publisher()
                    if publisher is None:
                        await _wait(stop, backoff.next_delay())
                        continue
                if time.monotonic() - last_backlog > _BACKLOG_REFRESH_S:
                    backlog = await self._config.shard.backlog(conn)
                    metrics.BACKLOG.set(backlog.events)
                    metrics.OLDEST_AGE.set(backlog.oldest_s)
                    last_backlog = time.monotonic()
                wake.clear()
                rows = await self._config.shard.fetch(conn, self._config.batch_size)
                if not rows:
                    await _wait(wake, self._config.poll_interval_s)
                    continue
                if await self._publish(conn, publisher, rows):
                    backoff.reset()
                else:
                    await self._close(publisher)
                    publisher = None
                    await _wait(stop, backoff.next_delay())
        finally:
            if publisher is not None:
                await self._close(publisher)

    async def _open_publisher(self) -> Publisher | None:
        try:
            return await Publisher.open(
                self._config.bootstrap, self._topic, self._config.topic_prefix
            )
        except Exception as exc:  # noqa: BLE001 - any broker failure: back off and retry
            self._log.warning("broker unavailable", error=repr(exc))
            metrics.FAILURES.inc()
            return None

    async def _publish(
        self, conn: asyncpg.Connection, publisher: Publisher, rows: list[OutboxRow]
    ) -> bool:
        """Publish a batch and delete what was acknowledged; True if all of it was."""
        result = await publisher.publish(rows)
        self._log.debug("published", rows=len(rows), acked=result.acked)
        acked = rows[: result.acked]
        if acked:
            await self._config.shard.acknowledge(conn, [r.id for r in acked])
            now = time.time()
            for row in acked:
                metrics.PUBLISH_LATENCY.observe(max(0.0, now - row.committed_at.timestamp()))
            metrics.PUBLISHED.inc(len(acked))
        if result.error is None:
            return True
        metrics.FAILURES.inc()
        self._log.warning(
            "publish failed; will resend",
            acked=len(acked),
            pending=len(rows) - len(acked),
            error=repr(result.error),
        )
        return False

    async def _close(self, publisher: Publisher) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(publisher.close(), 10)
