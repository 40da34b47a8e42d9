"""The servers `keel-stream dev` starts itself (PostgreSQL, the broker), and their restarts.

dev starts an embedded PostgreSQL without KEEL_DATABASE_URL and a broker without
KEEL_KAFKA_BOOTSTRAP (the memory-only embedded one, or a durable Apache Kafka under the data
directory with --kafka apache), recording each process as it starts (keel_stream.dev.pids).

While dev runs, `watch_servers` looks at them every POLL_S. One that died is restarted on the same
port and data directory, after a delay that grows with each failed try (as a child's does,
keel_stream.dev.children.Restarts), with one `error` line when it is found dead and one `info`
line once it runs again. What the rest of the platform must do around a broker restart (hold the
clients that must not touch a new broker before the topics are back, then realign) is the
caller's, in the hooks it passes.

A server is started from the thread given to `Embedded.run` (one that lives as long as dev):
the embedded broker is armed to die with the thread that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import structlog

from keel_stream.dev.children import Restarts
from keel_stream.dev.pids import DevPids
from keel_stream.dev.postgres import EmbeddedPostgres
from keel_stream.errors import BrokerUnavailable, InvalidSetting
from keel_stream.kafka.apache import ApacheKafka
from keel_stream.kafka.broker import EmbeddedBroker
from keel_stream.procs import child_exit, die_with_parent
from keel_stream.settings import KeelSettings

__all__ = ["POLL_S", "Embedded", "ServerHooks", "embedded_servers", "watch_servers"]

POLL_S: Final = 0.25
_SETTLE_S: Final = 0.3
"""How long a dead server waits for a stop that comes with it before it counts as a crash."""


@dataclass
class Embedded:
    """The servers dev starts itself (None: configured, someone else runs it)."""

    postgres: EmbeddedPostgres | None
    broker: EmbeddedBroker | ApacheKafka | None
    pids: DevPids
    log: structlog.stdlib.BoundLogger
    broker_pid: int | None = field(default=None, init=False)

    @property
    def memory_only(self) -> bool:
        """The broker dev runs forgets everything when it stops."""
        return isinstance(self.broker, EmbeddedBroker)

    def start(self, settings: KeelSettings) -> tuple[str, str]:
        dsn, servers = settings.database_url, settings.kafka_bootstrap
        if self.postgres is not None:
            dsn = self._start_postgres()
            self.log.info("embedded postgres started", log_file=str(self.postgres.log_file))
        if self.broker is not None:
            try:
                servers = self._start_broker()
            except RuntimeError as exc:
                raise BrokerUnavailable(str(exc)) from exc
            self.log.info("broker started", bootstrap=servers, kind=type(self.broker).__name__)
        if dsn is None or servers is None:  # each is configured, or started just above
            raise InvalidSetting("dev needs a database and a broker: set both or neither")
        return dsn, servers

    def _start_postgres(self) -> str:
        assert self.postgres is not None
        try:
            return self.postgres.start()
        finally:  # recorded even when start-up failed halfway
            postmaster = self.postgres.postmaster or self.postgres.running_postmaster()
            self.pids.record("postgres", postmaster.pid if postmaster else None)

    def _start_broker(self) -> str:
        assert self.broker is not None
        servers = self.broker.start()
        self.broker_pid = self.broker.pid
        self.pids.record("broker", self.broker_pid)
        return servers

    def broker_exit(self) -> str | None:
        """How the broker dev started ended; None while it runs (or when dev started none)."""
        return None if self.broker_pid is None else child_exit(self.broker_pid)

    def dead_postmaster(self) -> int | None:
        """The pid of the PostgreSQL postmaster dev started when it is gone; else None."""
        postmaster = None if self.postgres is None else self.postgres.postmaster
        return postmaster.pid if postmaster is not None and not postmaster.alive() else None

    def restart_broker(self) -> str:
        """Start the broker again on its port (the dead one reaped first); RuntimeError when it
        does not start."""
        broker = self.broker
        assert broker is not None
        broker.stop()
        self.broker_pid = None
        if isinstance(broker, ApacheKafka):  # the same ports, or fail: the clients know them
            self.broker = ApacheKafka(
                broker.data_dir,
                log_path=broker.log_path,
                port=broker.port,
                controller_port=broker.controller_port,
            )
        return self._start_broker()

    def restart_postgres(self) -> str:
        """Start PostgreSQL again on its data directory; RuntimeError (or the wheel's error)
        when it does not start."""
        assert self.postgres is not None
        self.postgres.stop()  # the handle's bookkeeping, and whatever still runs there
        return self._start_postgres()

    def stop(self) -> bool:
        """Stop what was started; False when something could not be stopped (logged)."""
        if self.broker is not None:
            self.broker.stop()
            self.log.info("broker stopped")
        if self.postgres is not None:
            try:
                self.postgres.stop()
            except RuntimeError as exc:
                self.log.error("embedded postgres did not stop", error=str(exc))
                return False
            self.log.info("embedded postgres stopped")
        return True


def _broker(settings: KeelSettings, root: Path) -> EmbeddedBroker | ApacheKafka | None:
    """The broker dev starts: none when one is configured; a durable Apache Kafka under the
    data directory with --kafka apache (its pid is recorded, so a leftover is stopped at the
    next start); else the memory-only embedded one, which dies with dev."""
    if settings.kafka_bootstrap is not None:
        return None
    if settings.dev_kafka == "apache":
        return ApacheKafka(root / "kafka", log_path=root / "kafka.log")
    return EmbeddedBroker(log_path=root / "broker.log", child_setup=die_with_parent())


def embedded_servers(settings: KeelSettings, log: structlog.stdlib.BoundLogger) -> Embedded:
    root = settings.data_dir
    return Embedded(
        postgres=EmbeddedPostgres(root / "postgres") if settings.database_url is None else None,
        broker=_broker(settings, root),
        pids=DevPids(root),
        log=log,
    )


@dataclass(frozen=True)
class ServerHooks:
    """What the platform does around a server's restart."""

    broker_down: Callable[[], Awaitable[None]]
    """The broker was found dead: hold what must not meet the new one first."""
    broker_up: Callable[[str], Awaitable[None]]
    """The broker runs again (its bootstrap): realign, release what was held."""
    postgres_up: Callable[[str], Awaitable[None]]
    """PostgreSQL runs again (its URL)."""


async def _stopped_within(stopping: asyncio.Event, seconds: float) -> bool:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), seconds)
    return stopping.is_set()


class _Restarter:
    """Restarts one server until it runs again (or dev stops)."""

    def __init__(
        self,
        name: str,
        restart: Callable[[], str],
        after: Callable[[str], Awaitable[None]],
        executor: Executor,
        log: structlog.stdlib.BoundLogger,
    ) -> None:
        self._name = name
        self._restart = restart
        self._after = after
        self._executor = executor
        self._log = log.bind(server=name)
        self._restarts = Restarts()

    async def recover(
        self,
        stopping: asyncio.Event,
        pid: int | None,
        how: str,
        first: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Log the death, run first (if given), then restart until it runs (or dev stops)."""
        delay = self._restarts.delay()
        self._log.error(
            "server exited unexpectedly; restarting it",
            pid=pid,
            exit=how,
            restart_in_s=round(delay, 2),
            restarts=self._restarts.count,
        )
        if first is not None:
            await first()
        while not await _stopped_within(stopping, delay):
            loop = asyncio.get_running_loop()
            try:
                address = await loop.run_in_executor(self._executor, self._restart)
                await self._after(address)
            except Exception as exc:  # noqa: BLE001 - whatever failed, try again later (logged)
                delay = self._restarts.delay()
                self._log.error(
                    "server did not restart; trying again",
                    error=str(exc).splitlines()[0] if str(exc) else repr(exc),
                    restart_in_s=round(delay, 2),
                    restarts=self._restarts.count,
                )
                continue
            self._restarts.started()
            self._log.info("server restarted", address=address, restarts=self._restarts.count)
            return


async def watch_servers(
    embedded: Embedded,
    stopping: asyncio.Event,
    hooks: ServerHooks,
    executor: Executor,
    log: structlog.stdlib.BoundLogger,
) -> None:
    """Restart the broker or PostgreSQL when it dies, until stopping is set. A restart under
    way when the stop comes is finished first, so the teardown stops what it started."""
    broker = _Restarter("broker", embedded.restart_broker, hooks.broker_up, executor, log)
    postgres = _Restarter("postgres", embedded.restart_postgres, hooks.postgres_up, executor, log)
    while not await _stopped_within(stopping, POLL_S):
        pid = embedded.broker_pid
        how = embedded.broker_exit()
        if how is not None and not await _stopped_within(stopping, _SETTLE_S):
            await broker.recover(stopping, pid, how, first=hooks.broker_down)
        gone = embedded.dead_postmaster()
        if gone is not None and not await _stopped_within(stopping, _SETTLE_S):
            await postgres.recover(stopping, gone, "gone")
