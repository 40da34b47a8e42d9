"""The six services `keel-stream dev` runs, each its own child process: the projections worker,
the outbox relay, an agent worker, the hooks process (dispatcher and senders), the trigger
scheduler and the API (keel_stream.dev.children.Service each).

One process per service keeps them apart: a request that keeps the API busy delays neither the
relay nor the worker, and one that crashes is restarted alone.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import structlog

from keel_stream.dev.children import Service
from keel_stream.dev.pids import DevPids
from keel_stream.settings import env_var

__all__ = ["HELD_GRACE_S", "SERVICES", "ServiceSpec", "Services"]


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    name: str
    """Its name in dev.pids.json and in dev's log lines."""
    command: tuple[str, ...]
    label: str
    """How dev's report names it."""


SERVICES: Final = (
    ServiceSpec("projector", ("projections", "run"), "projections worker"),
    ServiceSpec("relay", ("relay",), "relay"),
    ServiceSpec("worker", ("worker",), "agent worker"),
    ServiceSpec("hooks", ("hooks", "run"), "hooks sender"),
    ServiceSpec("triggers", ("triggers", "run"), "trigger scheduler"),
    ServiceSpec("api", ("api",), "api server"),
)
HELD_GRACE_S: Final = 2.0
"""How long a service held for a broker restart has to exit before it is SIGKILLed: it is
talking to a dead broker (the projections worker's shutdown waits for it), and both it and the
relay are safe to kill (their progress is in PostgreSQL)."""


class Services:
    """The services, started together and stopped together."""

    def __init__(
        self,
        env: Mapping[str, str],
        metrics_ports: Mapping[str, int],
        pids: DevPids,
        log: structlog.stdlib.BoundLogger,
    ) -> None:
        def on_start(name: str, pid: int) -> None:
            pids.record(name, pid)

        self.by_name = {
            spec.name: Service(
                spec.name,
                spec.command,
                _with_metrics(env, metrics_ports.get(spec.name)),
                on_start=on_start,
                log=log,
            )
            for spec in SERVICES
        }
        self._labels = {spec.name: spec.label for spec in SERVICES}

    def __iter__(self) -> Iterator[Service]:
        return iter(self.by_name.values())

    async def start(self, say: Callable[[str], None]) -> None:
        for service in self:
            pid = await service.start()
            say(f"{self._labels[service.name]}: pid {pid}")

    def exits(self) -> list[asyncio.Future[Any]]:
        """A future per service, done when its current process exits (cancel them after use)."""
        return [
            asyncio.ensure_future(service.process.wait())
            for service in self
            if service.process is not None
        ]

    def exited(self) -> list[str]:
        """The services whose current process has exited, each with how it ended."""
        return [
            f"{service.name} (pid {service.pid}, exit {service.process.returncode})"
            for service in self
            if service.process is not None and service.process.returncode is not None
        ]

    async def supervise(self, stopping: asyncio.Event) -> None:
        await asyncio.gather(*(service.supervise(stopping) for service in self))

    async def hold(self, names: Iterable[str]) -> None:
        await asyncio.gather(*(self.by_name[name].hold(HELD_GRACE_S) for name in names))

    def release(self, names: Iterable[str]) -> None:
        for name in names:
            self.by_name[name].release()

    def set_env(self, name: str, value: str) -> None:
        for service in self:
            service.env[name] = value

    async def restart_all(self) -> None:
        await asyncio.gather(*(service.restart() for service in self))

    async def stop(self) -> None:
        """SIGTERM every child, SIGKILL what is left after the grace; all at once."""
        await asyncio.gather(*(service.stop() for service in self))


def _with_metrics(env: Mapping[str, str], port: int | None) -> dict[str, str]:
    own = dict(env)
    if port is not None:
        own[env_var("metrics_port")] = str(port)
    return own
