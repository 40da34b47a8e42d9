"""The platform for the chaos run: each service its own OS process, restarted like a supervisor.

The servers are an embedded PostgreSQL (restartable on the same data directory, hence the same
socket) and Apache Kafka from Maven with a durable log directory on fixed ports (so a stopped
broker comes back with its topics on the same address); the memory-only embedded broker only
when Apache Kafka cannot run here. The services are `keel-stream api`, `relay`,
`projections run` and `worker`, each a child process with its log in <root>/logs/, restarted
`restart_after_s` after it exits, whether the chaos driver killed it or it crashed (a crash is
counted: a supervisor would restart it too, but it is a finding).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import httpx

from keel_stream.dev.postgres import EmbeddedPostgres
from keel_stream.dev.readiness import Readiness, wait_projector_live
from keel_stream.dev.resume import align_with_broker
from keel_stream.kafka.admin import apply_catalog
from keel_stream.kafka.apache import ApacheKafka
from keel_stream.kafka.apache_resolve import unavailable
from keel_stream.kafka.broker import EmbeddedBroker, free_port
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.procs import die_with_parent
from keel_stream.store import opened_store
from keel_stream.topics.groups import projector_group

__all__ = [
    "SERVICES", "Cluster", "Crash", "Servers", "Service", "create_api_key", "keel", "keel_ok",
    "supervised",
]  # fmt: skip

SERVICES: Final = ("api", "relay", "projector", "worker")
TENANT: Final = "chaos"
_READY_S: Final = 120.0


@dataclass(frozen=True)
class Crash:
    """A service that exited without being killed by the driver."""

    service: str
    returncode: int
    at_s: float
    last_line: str


async def keel(*args: str, env: dict[str, str], timeout_s: float = 120.0) -> tuple[int, str]:
    """Run `keel-stream ARGS` to the end; its exit status and its output (both streams)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keel_stream", *args,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout_s)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise
    return process.returncode or 0, out.decode(errors="replace")


async def keel_ok(*args: str, env: dict[str, str]) -> str:
    """`keel-stream ARGS` to the end, its output; RuntimeError with it if it failed."""
    status, out = await keel(*args, env=env)
    if status != 0:
        raise RuntimeError(f"keel-stream {' '.join(args)} failed ({status}):\n{out}")
    return out


async def create_api_key(env: dict[str, str]) -> str:
    """The chaos tenant and a new API key for it."""
    await keel_ok("tenants", "create", TENANT, env=env)
    out = await keel_ok("keys", "create", "--tenant", TENANT, env=env)
    lines = [line for line in out.splitlines() if line.startswith("key:")]
    if not lines:
        raise RuntimeError(f"keel-stream keys create printed no key:\n{out}")
    return lines[0].removeprefix("key:").strip()


@dataclass
class Service:
    """One service process under a small supervisor: restarted after it exits, unless held."""

    name: str
    args: tuple[str, ...]
    env: dict[str, str]
    log_path: Path
    restart_after_s: float
    crashes: list[Crash]
    clock: Callable[[], float]
    kills: int = 0
    starts: int = 0
    spawned_at: float = 0.0
    process: asyncio.subprocess.Process | None = None
    allowed: asyncio.Event = field(default_factory=asyncio.Event)
    closing: bool = False
    _killed: bool = False
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.allowed.set()
        self._task = asyncio.create_task(self._supervise(), name=f"supervise-{self.name}")

    async def _spawn(self) -> asyncio.subprocess.Process:
        self.starts += 1
        self.spawned_at = time.monotonic()
        with self.log_path.open("ab") as log:
            log.write(f"--- chaos: start #{self.starts} at {time.ctime()} ---\n".encode())
            log.flush()
            return await asyncio.create_subprocess_exec(
                sys.executable, "-m", "keel_stream", *self.args,
                env={**os.environ, **self.env},
                stdout=log, stderr=asyncio.subprocess.STDOUT,
                preexec_fn=die_with_parent(),
            )  # fmt: skip

    async def _supervise(self) -> None:
        while not self.closing:
            await self.allowed.wait()
            if self.closing:
                return
            self.process = await self._spawn()
            returncode = await self.process.wait()
            if self.closing:
                return
            if not self._killed:
                self.crashes.append(Crash(self.name, returncode, self.clock(), self._last_line()))
            self._killed = False
            await asyncio.sleep(self.restart_after_s)

    def _last_line(self) -> str:
        """The last line the process wrote (usually why it exited), shortened."""
        with self.log_path.open("rb") as log:
            log.seek(max(0, self.log_path.stat().st_size - 4096))
            lines = log.read().decode(errors="replace").splitlines()
        return next((line for line in reversed(lines) if line.strip()), "")[-300:]

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    def running_for(self) -> float:
        """Seconds since the running process was started (0 when none runs)."""
        return time.monotonic() - self.spawned_at if self.running else 0.0

    def kill(self) -> bool:
        """SIGKILL the running process (the supervisor restarts it); False when none runs."""
        if not self.running or self.process is None:
            return False
        self._killed = True
        self.kills += 1
        self.process.send_signal(signal.SIGKILL)
        return True

    async def hold(self) -> None:
        """Keep the service down (killed if it runs, not counted as a kill) until release()."""
        self.allowed.clear()
        if self.running and self.process is not None:
            self._killed = True
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()

    def release(self) -> None:
        self.allowed.set()

    async def close(self) -> None:
        """Stop supervising and end the process (SIGTERM, then SIGKILL after a grace period)."""
        self.closing = True
        self.allowed.set()
        if self.running and self.process is not None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 15)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def supervised(
    root: Path,
    commands: dict[str, tuple[str, ...]],
    env: dict[str, str],
    restart_after_s: float,
    crashes: list[Crash],
    clock: Callable[[], float],
) -> dict[str, Service]:
    """Each command a started Service named after it, with a data directory of its own under
    root and its log in root/logs."""
    services = {}
    for name, args in commands.items():
        own = root / name
        own.mkdir(exist_ok=True)
        service = Service(
            name=name,
            args=args,
            env={**env, "KEEL_DATA_DIR": str(own)},
            log_path=root / "logs" / f"{name}.log",
            restart_after_s=restart_after_s,
            crashes=crashes,
            clock=clock,
        )
        service.start()
        services[name] = service
    return services


class Servers:
    """PostgreSQL and the broker, each stoppable and restartable on the same address."""

    def __init__(self, root: Path, *, kafka: str = "auto") -> None:
        logs = root / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.postgres = EmbeddedPostgres(root / "postgres")
        reason = "embedded broker asked for" if kafka == "embedded" else unavailable()
        self.broker: ApacheKafka | EmbeddedBroker
        if reason is None:
            self.broker = ApacheKafka(
                root / "kafka",
                log_path=logs / "kafka.log",
                port=free_port(),
                controller_port=free_port(),
            )
            self.broker_name = f"apache-kafka {self.broker.version} (maven, durable log dir)"
        else:
            self.broker = EmbeddedBroker(port=free_port(), log_path=logs / "broker.log")
            self.broker_name = (
                f"embedded broker, memory-only (Apache Kafka not used: {reason}); its topics "
                "are re-applied and republished from the ledger after the broker stop"
            )
        self.durable = reason is None
        self.dsn = ""

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def start(self) -> None:
        self.dsn = self.postgres.start()
        self.broker.start()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.broker.stop()
        self.postgres.stop()


class Cluster:
    """The servers and the four services, set up for one tenant with one API key."""

    def __init__(self, root: Path, servers: Servers, restart_after_s: float) -> None:
        self.root = root
        self.servers = servers
        self.api_port = free_port()
        self.crashes: list[Crash] = []
        self.epoch = time.monotonic()
        """Where the run's clock starts: the start of the chaos phase, once it began."""
        self.services: dict[str, Service] = {}
        self.restart_after_s = restart_after_s
        self.key = ""

    def since(self) -> float:
        """Seconds since the epoch (negative before the chaos phase)."""
        return round(time.monotonic() - self.epoch, 1)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def env(self) -> dict[str, str]:
        return {
            "KEEL_DATABASE_URL": self.servers.dsn,
            "KEEL_KAFKA_BOOTSTRAP": self.servers.bootstrap,
            "KEEL_TOPIC_PREFIX": "",
        }

    async def _keel(self, *args: str) -> str:
        return await keel_ok(*args, env=self.env)

    async def prepare(self) -> None:
        """Migrate and apply the topics (side by side), then align the stored offsets."""
        await asyncio.gather(self._keel("migrate"), self._keel("topics", "apply"))
        await self.align()

    async def create_key(self) -> None:
        """The tenant and its API key (while the services start)."""
        self.key = await create_api_key(self.env)

    async def align(self) -> None:
        """What `keel-stream dev` does at start: topics applied, stale stored offsets reset and
        a new (empty) events topic refilled from the ledger. A no-op on a durable broker."""
        report = await apply_catalog(KafkaSettings(self.servers.bootstrap))
        async with opened_store(self.servers.dsn, max_size=1) as store:
            await align_with_broker(
                store, KafkaSettings(self.servers.bootstrap), "", report.created, self.root
            )

    def start_services(self) -> None:
        commands = {
            "api": ("api", "--port", str(self.api_port)),
            "relay": ("relay",),
            "projector": ("projections", "run"),
            "worker": ("worker",),
        }
        ordered = {name: commands[name] for name in SERVICES}
        self.services.update(
            supervised(self.root, ordered, self.env, self.restart_after_s, self.crashes, self.since)
        )

    async def wait_ready(self) -> None:
        """Until the API answers /readyz and the projections worker's group is live."""
        deadline = time.monotonic() + _READY_S
        async with httpx.AsyncClient(base_url=self.api_url, timeout=5) as client:
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the API did not get ready; see {self.root / 'logs'}")
                await asyncio.sleep(0.2)
        readiness = await wait_projector_live(
            KafkaSettings(self.servers.bootstrap),
            projector_group(""),
            [],
            max(1.0, deadline - time.monotonic()),
        )
        if readiness is not Readiness.LIVE:
            raise RuntimeError(f"the projections worker is not live: {readiness}")

    async def close(self) -> None:
        await asyncio.gather(*(service.close() for service in self.services.values()))
