"""The lifecycle of a daemon command (relay, worker, hooks run, triggers run; the start of api
and projections run): start, ready, drain, stop, the same way for each.

- start: the settings were built once at the command's edge; the metrics port, when one is set,
  is checked free before anything runs (PortInUse: exit status 1) and served with the metric
  families of what the process runs;
- ready: the body logs it once it serves (the dev supervisor waits on the API's /healthz and on
  the projections worker's consumer group, not on these lines);
- drain: SIGINT and SIGTERM set the body's stop event (the handlers are installed before the
  body runs); the body finishes or releases what it has in flight, within its own grace;
- stop: the body returns and the command exits 0. A KeelError ends it with its one line and
  exit status (keel_stream.cli.errors: 2 for a setting, 1 otherwise); anything else is a bug.

The API's server (uvicorn, which drains open streams on SIGTERM itself) and the projections
worker (Faust, which owns its signals and serves its metrics in its own start-up) use `start`
and `preflight` only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from keel_stream.cli.preflight import ensure_port_free
from keel_stream.dev.signals import until_signalled
from keel_stream.metrics import METRICS_PORT_HINT, Component, declare, serve_metrics
from keel_stream.settings import KeelSettings

__all__ = ["Daemon"]

T = TypeVar("T")
Body = Callable[[asyncio.Event], Awaitable[T]]


@dataclass(frozen=True, slots=True)
class Daemon:
    """One daemon command: its settings and the components its process runs."""

    settings: KeelSettings
    components: tuple[Component, ...] = ()

    def preflight(self) -> None:
        """Refuse a metrics port something already listens on."""
        port = self.settings.metrics_port
        if port is not None:
            ensure_port_free(self.settings.metrics_host, port, hint=METRICS_PORT_HINT)

    def start(self, *, metrics: bool = True) -> None:
        """Declare what the process runs; with `metrics`, serve the metrics port when set."""
        declare(*self.components)
        if metrics and self.settings.metrics_port is not None:
            self.preflight()
            serve_metrics(self.settings.metrics_host, self.settings.metrics_port)

    def run(self, body: Body[T]) -> T:
        """Run body(stop) until it returns; SIGINT/SIGTERM set stop, and the body drains."""
        return asyncio.run(until_signalled(body))

    def serve(self, body: Body[T]) -> T:
        """start, then run."""
        self.start()
        return self.run(body)
