"""Running relays in-process (as tasks) and as real processes (to SIGKILL them)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import orjson

from keel_stream.relay import Relay, RelayConfig
from keel_stream.store.outbox import RELAY_LOCK_CLASS


@contextlib.asynccontextmanager
async def relay_task(config: RelayConfig) -> AsyncIterator[Relay]:
    """A relay running as a task of the test's event loop until the block ends."""
    relay = Relay.from_config(config)
    stop = asyncio.Event()
    task = asyncio.create_task(relay.run(stop))
    try:
        yield relay
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)


class RelayProcess:
    """`keel-stream relay` as a child process whose JSON log lines are collected."""

    def __init__(self, database_url: str, bootstrap: str, prefix: str, **env: str) -> None:
        self._args = [
            sys.executable,
            "-m",
            "keel_stream",
            "relay",
            "--database-url",
            database_url,
            "--bootstrap",
            bootstrap,
        ]
        self._env = {**os.environ, "KEEL_TOPIC_PREFIX": prefix, **env}
        self.shard = 0
        """The outbox shard it serves (`--shard`), of KEEL_RELAY_SHARDS."""
        self.process: asyncio.subprocess.Process | None = None
        self.events: list[str] = []
        self.entries: list[dict[str, Any]] = []
        """The relay's log entries (component relay), in order."""
        self.lines: list[bytes] = []
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> RelayProcess:
        self.process = await asyncio.create_subprocess_exec(
            *self._args,
            "--shard",
            str(self.shard),
            env=self._env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self.process is not None
        assert self.process.stderr is not None
        async for line in self.process.stderr:
            self.lines.append(line)
            with contextlib.suppress(orjson.JSONDecodeError):
                entry = orjson.loads(line)
                if isinstance(entry, dict) and entry.get("component") == "relay":
                    self.entries.append(entry)
                    self.events.append(str(entry.get("event")))

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def wait_for_log(self, event: str, timeout_s: float) -> None:
        deadline = asyncio.get_running_loop().time() + timeout_s
        while event not in self.events:
            if self.process is not None and self.process.returncode is not None:
                raise RuntimeError(f"relay exited with {self.process.returncode}: {self.events}")
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"relay never logged {event!r}: {self.events}")
            await asyncio.sleep(0.05)

    async def kill(self, sig: signal.Signals = signal.SIGKILL) -> None:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(sig)
            await asyncio.wait_for(self.process.wait(), 30)
        if self._reader is not None:
            await asyncio.wait_for(self._reader, 10)


@contextlib.asynccontextmanager
async def relay_processes(*relays: RelayProcess) -> AsyncIterator[None]:
    """Make sure every child relay is gone when the test ends, passed or failed."""
    try:
        yield
    finally:
        for relay in relays:
            if relay.process is not None:
                await relay.kill()


class RelayFleet:
    """Relay processes started one after another (as others are killed); whatever is still
    running when the block ends is killed."""

    def __init__(self, database_url: str, bootstrap: str, prefix: str, **env: str) -> None:
        self._args = (database_url, bootstrap, prefix)
        self._env = env
        self.shard = 0
        """The shard its relays serve."""
        self.relays: list[RelayProcess] = []

    async def start(self) -> RelayProcess:
        relay = RelayProcess(*self._args, **self._env)
        relay.shard = self.shard
        self.relays.append(relay)
        return await relay.start()

    def with_pid(self, pid: int) -> RelayProcess:
        (relay,) = (r for r in self.relays if r.process is not None and r.pid == pid)
        return relay

    async def kill_all(self) -> None:
        for relay in self.relays:
            if relay.process is not None:
                await relay.kill()

    async def __aenter__(self) -> RelayFleet:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.kill_all()


async def active_relay_pid(pool: asyncpg.Pool, shard: int = 0) -> int | None:
    """The OS pid of the relay whose connection holds the shard's lock (from its
    application_name, keel-relay:<host>:<pid>), in this database: pg_locks shows the whole
    server's, and a test beside this one runs relays of its own."""
    name = await pool.fetchval(
        """
        SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)
        WHERE l.locktype = 'advisory' AND l.classid = $1 AND l.objid = $2 AND l.granted
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        """,
        RELAY_LOCK_CLASS,
        shard,
    )
    return None if name is None else int(str(name).rsplit(":", 1)[1])
