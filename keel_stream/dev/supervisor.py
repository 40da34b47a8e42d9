"""`keel-stream dev`: the whole platform on embedded defaults, torn down on any signal.

One dev per data directory (keel_stream.dev.lock). Holding the lock, dev first stops what a dead
predecessor left running (keel_stream.dev.pids), then starts what is not configured (an embedded
PostgreSQL without KEEL_DATABASE_URL, an embedded broker without KEEL_KAFKA_BOOTSTRAP), recording
each process as it starts; migrates, applies the topic catalog, aligns the stored projection
offsets and the topics with the broker (keel_stream.dev.resume); then runs the relay, an agent
worker and the API in-process and the projections worker as a child process. It says "ready"
once the projections worker's group is live and writes its addresses to <data_dir>/dev.json for
the other commands. Whatever was started is stopped again on SIGINT/SIGTERM, whether start-up
finished or not; the broker and the worker are armed to die with dev if it is SIGKILLed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import structlog

from keel_stream.api.server import DrainingServer, api_server
from keel_stream.dev.addresses import remove_addresses, write_addresses
from keel_stream.dev.children import child_process
from keel_stream.dev.components import api_config, relay_config, worker_config
from keel_stream.dev.lock import dev_lock
from keel_stream.dev.pids import DevPids, sweep_leftovers
from keel_stream.dev.postgres import EmbeddedPostgres
from keel_stream.dev.procs import die_with_parent
from keel_stream.dev.readiness import Readiness, projector_group, wait_projector_live
from keel_stream.dev.resume import align_with_broker
from keel_stream.dev.signals import remember_stop_signals, signals_remembered, until_signalled
from keel_stream.errors import BrokerUnavailable, InvalidSetting
from keel_stream.gateway.config import load_boot_config
from keel_stream.kafka.apache import ApacheKafka
from keel_stream.kafka.broker import EmbeddedBroker
from keel_stream.kafka.errors import kafka_translated
from keel_stream.logs import get_logger, route_stdlib_logging
from keel_stream.metrics import Component, declare
from keel_stream.relay import Relay, Shard
from keel_stream.settings import KeelSettings
from keel_stream.store import pooled
from keel_stream.store.admin import ensure_key, migrate_database, migration_summary
from keel_stream.topics.admin import apply_catalog
from keel_stream.worker.worker import Worker

__all__ = ["API_DID_NOT_START", "DEV_TENANT", "PROJECTOR_DID_NOT_START", "supervise"]

DEV_TENANT = "dev"
API_DID_NOT_START = 1
"""supervise's exit status when the API did not start (uvicorn has logged why)."""
PROJECTOR_DID_NOT_START = 1
"""supervise's exit status when the projections worker ended before it was live."""
LIVE_TIMEOUT_S: Final = 120.0
"""How long dev waits for the projections worker before saying ready without it."""

Say = Callable[[str], None]


@dataclass
class _Embedded:
    """The servers dev starts itself (None: configured, someone else runs it)."""

    postgres: EmbeddedPostgres | None
    broker: EmbeddedBroker | ApacheKafka | None
    pids: DevPids
    log: structlog.stdlib.BoundLogger

    def start(self, settings: KeelSettings) -> tuple[str, str]:
        dsn, servers = settings.database_url, settings.kafka_bootstrap
        if self.postgres is not None:
            try:
                dsn = self.postgres.start()
            finally:  # recorded even when start-up failed halfway
                postmaster = self.postgres.postmaster or self.postgres.running_postmaster()
                self.pids.record("postgres", postmaster.pid if postmaster else None)
            self.log.info("embedded postgres started", log_file=str(self.postgres.log_file))
        if self.broker is not None:
            try:
                servers = self.broker.start()
            except RuntimeError as exc:
                raise BrokerUnavailable(str(exc)) from exc
            self.pids.record("broker", self.broker.pid)
            self.log.info("broker started", bootstrap=servers, kind=type(self.broker).__name__)
        if dsn is None or servers is None:  # each is configured, or started just above
            raise InvalidSetting("dev needs a database and a broker: set both or neither")
        return dsn, servers

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


def _embedded(settings: KeelSettings, log: structlog.stdlib.BoundLogger) -> _Embedded:
    root = settings.data_dir
    return _Embedded(
        postgres=EmbeddedPostgres(root / "postgres") if settings.database_url is None else None,
        broker=_broker(settings, root),
        pids=DevPids(root),
        log=log,
    )


def supervise(settings: KeelSettings, *, once: bool, say: Say) -> int:
    """Run the platform until SIGINT/SIGTERM (or, with once, report and stop); return the exit
    status. DevAlreadyRunning, before anything starts, when another dev holds the data dir."""
    log = get_logger("dev")
    with dev_lock(settings.data_dir):
        swept = sweep_leftovers(settings.data_dir)
        if swept.stopped:
            log.info("stopped what a previous dev left running", processes=swept.stopped)
        if swept.left:
            log.error("a previous dev's processes did not stop", processes=swept.left)
        embedded = _embedded(settings, log)
        with signals_remembered() as asked_to_stop:
            try:
                dsn, servers = embedded.start(settings)
                return asyncio.run(
                    until_signalled(
                        lambda stop: _platform(
                            settings, dsn, servers, stop, once=once, say=say, pids=embedded.pids
                        ),
                        already=asked_to_stop.is_set(),
                    )
                )
            finally:
                # asyncio put the default handlers back when its loop closed: remember again.
                remember_stop_signals(asked_to_stop)
                remove_addresses(settings.data_dir)
                if embedded.stop():
                    embedded.pids.clear()


async def _platform(
    settings: KeelSettings,
    dsn: str,
    servers: str,
    stop: asyncio.Event,
    *,
    once: bool,
    say: Say,
    pids: DevPids,
) -> int:
    say(migration_summary(await migrate_database(dsn)))
    async with kafka_translated("apply topics"):
        topics = await apply_catalog(servers, settings.topic_prefix)
    say(f"database: {dsn}")
    say(f"kafka: {servers} (topics: {len(topics.created)} created)")
    async with pooled(dsn, max_size=1) as pool:
        resumed = await align_with_broker(
            pool, servers, settings.topic_prefix, topics.created, settings.data_dir
        )
        say(f"broker: {resumed.summary()}")
        if once:
            return 0
        key = await ensure_key(pool, DEV_TENANT, "keel-stream dev", settings.dev_api_key)
    return await _serve_platform(settings, dsn, servers, stop, key=key, say=say, pids=pids)


async def _serve_platform(
    settings: KeelSettings,
    dsn: str,
    servers: str,
    stop: asyncio.Event,
    *,
    key: str,
    say: Say,
    pids: DevPids,
) -> int:
    env = {
        "KEEL_DATABASE_URL": dsn,
        "KEEL_KAFKA_BOOTSTRAP": servers,
        "KEEL_DATA_DIR": str(settings.data_dir),
    }
    config = api_config(settings, dsn, servers)
    config.boot_config = load_boot_config(os.environ)
    config.data_dir = settings.data_dir
    server = api_server(config, settings.api_host, settings.api_port, on_exit=stop.set)
    route_stdlib_logging()  # uvicorn has just installed its own handlers
    declare(Component.RELAY, Component.WORKER, Component.API, Component.GATEWAY)
    async with child_process("projections", "run", env=env) as projector:
        pids.record("projector", projector.pid)
        say(f"projections worker: pid {projector.pid}")
        serving = asyncio.create_task(_serve(server))
        if not await _api_started(server, serving):
            await serving
            return API_DID_NOT_START
        api_url = f"http://{settings.api_host}:{server.bound_port}"
        say(f"api: {api_url}")
        say(f"api key: {key}")
        relay = Relay.from_config(relay_config(settings, dsn, servers, Shard(index=0, count=1)))
        worker = Worker(worker_config(settings, dsn, servers))
        running = asyncio.gather(relay.run(stop), worker.run(stop))
        status = 0
        if await _until_live(settings.topic_prefix, servers, projector, stop, running):
            write_addresses(
                settings.data_dir, database_url=dsn, kafka_bootstrap=servers, api_url=api_url
            )
            say("ready; Ctrl-C or SIGTERM stops")
        elif not stop.is_set():
            status = PROJECTOR_DID_NOT_START
            stop.set()
        await running
        server.should_exit = True
        await serving
    return status


async def _until_live(
    prefix: str,
    servers: str,
    projector: asyncio.subprocess.Process,
    stop: asyncio.Event,
    running: asyncio.Future[Any],
) -> bool:
    """Wait for the projections worker to be live; False when it (or the platform) ended
    first. At the deadline it logs a warning and answers True: dev serves without it."""
    exited = asyncio.create_task(projector.wait())
    stopping = asyncio.create_task(stop.wait())
    try:
        readiness = await wait_projector_live(
            servers, projector_group(prefix), [exited, stopping, running], LIVE_TIMEOUT_S
        )
    finally:
        exited.cancel()
        stopping.cancel()
    log = get_logger("dev")
    if readiness is Readiness.TIMED_OUT:
        log.warning("the projections worker is not live yet; read models may lag")
        return True
    if readiness is Readiness.ENDED and projector.returncode is not None:
        log.error("the projections worker exited before it was live", status=projector.returncode)
    return readiness is Readiness.LIVE


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
