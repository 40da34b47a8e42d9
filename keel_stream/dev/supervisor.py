"""`keel-stream dev`: the whole platform on embedded defaults, torn down on any signal.

Starts what is not configured (an embedded PostgreSQL without KEEL_DATABASE_URL, an embedded
broker without KEEL_KAFKA_BOOTSTRAP), migrates, applies the topic catalog, then runs the relay,
an agent worker and the API in-process and the projections worker as a child process until
SIGINT/SIGTERM. Whatever was started is stopped again, whether start-up finished or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from keel_stream.api.server import DrainingServer, api_server
from keel_stream.dev.children import child_process
from keel_stream.dev.components import api_config, relay_config, worker_config
from keel_stream.dev.postgres import EmbeddedPostgres
from keel_stream.dev.signals import remember_stop_signals, signals_remembered, until_signalled
from keel_stream.errors import BrokerUnavailable, InvalidSetting
from keel_stream.gateway.config import load_boot_config
from keel_stream.kafka.broker import EmbeddedBroker
from keel_stream.kafka.errors import kafka_translated
from keel_stream.logs import get_logger
from keel_stream.relay import Relay, Shard
from keel_stream.settings import KeelSettings
from keel_stream.store import pooled
from keel_stream.store.admin import ensure_key, migrate_database, migration_summary
from keel_stream.topics.admin import apply_catalog
from keel_stream.worker.worker import Worker

__all__ = ["API_DID_NOT_START", "DEV_TENANT", "supervise"]

DEV_TENANT = "dev"
API_DID_NOT_START = 1
"""supervise's exit status when the API did not start (uvicorn has logged why)."""

Say = Callable[[str], None]


@dataclass
class _Embedded:
    """The servers dev starts itself (None: configured, someone else runs it)."""

    postgres: EmbeddedPostgres | None
    broker: EmbeddedBroker | None
    log: structlog.stdlib.BoundLogger

    def start(self, settings: KeelSettings) -> tuple[str, str]:
        dsn, servers = settings.database_url, settings.kafka_bootstrap
        if self.postgres is not None:
            dsn = self.postgres.start()
            self.log.info("embedded postgres started", log_file=str(self.postgres.log_file))
        if self.broker is not None:
            try:
                servers = self.broker.start()
            except RuntimeError as exc:
                raise BrokerUnavailable(str(exc)) from exc
            self.log.info("embedded broker started", bootstrap=servers)
        if dsn is None or servers is None:  # each is configured, or started just above
            raise InvalidSetting("dev needs a database and a broker: set both or neither")
        return dsn, servers

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop()
            self.log.info("embedded broker stopped")
        if self.postgres is not None:
            self.postgres.stop()
            self.log.info("embedded postgres stopped")


def supervise(settings: KeelSettings, *, once: bool, say: Say) -> int:
    """Run the platform until SIGINT/SIGTERM (or, with once, report and stop); return the exit
    status."""
    root = settings.data_dir
    embedded = _Embedded(
        postgres=EmbeddedPostgres(root / "postgres") if settings.database_url is None else None,
        broker=(
            EmbeddedBroker(log_path=_log_path(root, "broker.log"))
            if settings.kafka_bootstrap is None
            else None
        ),
        log=get_logger("dev"),
    )
    with signals_remembered() as asked_to_stop:
        try:
            dsn, servers = embedded.start(settings)
            return asyncio.run(
                until_signalled(
                    lambda stop: _platform(settings, dsn, servers, stop, once=once, say=say),
                    already=asked_to_stop.is_set(),
                )
            )
        finally:
            # asyncio put the default handlers back when its loop closed: remember again.
            remember_stop_signals(asked_to_stop)
            embedded.stop()


def _log_path(root: Path, name: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return root / name


async def _platform(
    settings: KeelSettings, dsn: str, servers: str, stop: asyncio.Event, *, once: bool, say: Say
) -> int:
    say(migration_summary(await migrate_database(dsn)))
    async with kafka_translated("apply topics"):
        topics = await apply_catalog(servers, settings.topic_prefix)
    say(f"database: {dsn}")
    say(f"kafka: {servers} (topics: {len(topics.created)} created)")
    if once:
        return 0
    async with pooled(dsn, max_size=1) as pool:
        key = await ensure_key(pool, DEV_TENANT, "keel-stream dev", settings.dev_api_key)
    env = {
        "KEEL_DATABASE_URL": dsn,
        "KEEL_KAFKA_BOOTSTRAP": servers,
        "KEEL_DATA_DIR": str(settings.data_dir),
    }
    config = api_config(settings, dsn, servers)
    config.boot_config = load_boot_config(os.environ)
    config.data_dir = settings.data_dir
    server = api_server(config, settings.api_host, settings.api_port, on_exit=stop.set)
    async with child_process("projections", "run", env=env) as projector:
        say(f"projections worker: pid {projector.pid}")
        serving = asyncio.create_task(_serve(server))
        if not await _api_started(server, serving):
            await serving
            return API_DID_NOT_START
        say(f"api: http://{settings.api_host}:{server.bound_port}")
        say(f"api key: {key}")
        say("ready; Ctrl-C or SIGTERM stops")
        relay = Relay.from_config(relay_config(settings, dsn, servers, Shard(index=0, count=1)))
        worker = Worker(worker_config(settings, dsn, servers))
        await asyncio.gather(relay.run(stop), worker.run(stop))
        server.should_exit = True
        await serving
    return 0


async def _serve(server: DrainingServer) -> None:
    # uvicorn ends the process (SystemExit) when it cannot start, having logged why; here that
    # would escape the event loop past the teardown's bookkeeping, so it becomes started=False.
    with contextlib.suppress(SystemExit):
        await server.serve()


async def _api_started(server: DrainingServer, serving: asyncio.Task[None]) -> bool:
    """Wait until the API listens (True) or has given up starting (False, uvicorn logged why);
    if serving failed, raise why."""
    started = asyncio.create_task(server.ready.wait())
    await asyncio.wait({serving, started}, return_when=asyncio.FIRST_COMPLETED)
    if serving.done():
        started.cancel()
        serving.result()
    return bool(server.started)
