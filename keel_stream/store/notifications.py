"""LISTEN on one channel, for as long as the process wants it: a lost connection (a database
restart, the network) is listened again with backoff. Readers treat notifications as hints and
catch up by seq from the ledger, so a gap while re-listening costs latency, never an event."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Protocol

import asyncpg

from keel_stream.errors import KeelError
from keel_stream.logs import get_logger
from keel_stream.retry import Backoff
from keel_stream.store.driver_errors import translated

__all__ = ["Listener", "PostgresListener"]


class Listener(Protocol):
    """A LISTEN on one channel: start, and stop."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class PostgresListener:
    """Calls `on_payload(payload)` for every NOTIFY on `channel`."""

    def __init__(self, pool: asyncpg.Pool, channel: str, on_payload: Callable[[str], None]) -> None:
        self._pool = pool
        self._channel = channel
        self._on_payload = on_payload
        self._connection: asyncpg.Connection | None = None
        self._relisten: asyncio.Task[None] | None = None
        self._log = get_logger("store.listen").bind(channel=channel)

    async def start(self) -> None:
        async with translated(f"listen {self._channel}"):
            connection = await self._pool.acquire()
            try:
                await connection.add_listener(self._channel, self._notified)
                connection.add_termination_listener(self._lost)
            except BaseException:
                await self._pool.release(connection)
                raise
        self._connection = connection

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: str) -> None:
        self._on_payload(payload)

    def _lost(self, *_: object) -> None:
        self._connection = None
        self._relisten = asyncio.get_running_loop().create_task(self._listen_again())

    async def _listen_again(self) -> None:
        backoff = Backoff(0.5, 10.0)
        while self._connection is None:
            try:
                await self.start()
                self._log.info("listening again")
            except KeelError as exc:
                self._log.warning("listen failed", error=str(exc))
                await asyncio.sleep(backoff.next_delay())

    async def stop(self) -> None:
        if self._relisten is not None:
            self._relisten.cancel()
        connection, self._connection = self._connection, None
        if connection is None:
            return
        with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            connection.remove_termination_listener(self._lost)
            await connection.remove_listener(self._channel, self._notified)
        with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            await self._pool.release(connection)
