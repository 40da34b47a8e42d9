"""`keel-stream dev`: the whole platform on embedded defaults, supervised, torn down on any signal.

One dev per data directory (keel_stream.dev.lock). Holding the lock, dev first stops what a dead
predecessor left running (keel_stream.dev.pids), then starts what is not configured (an embedded
PostgreSQL without KEEL_DATABASE_URL, a broker without KEEL_KAFKA_BOOTSTRAP; see
keel_stream.dev.servers), recording each process as it starts; migrates, applies the topic
catalog, aligns the stored projection offsets and the topics with the broker
(keel_stream.dev.resume); then runs each service (the projections worker, the relay, an agent
worker, the API) as a child process of its own (keel_stream.dev.services). It says "ready" once
the API answers and the projections worker's group is live, and writes its addresses to
<data_dir>/dev.json for the other commands.

From then on it supervises: a service that dies is restarted with backoff
(keel_stream.dev.children); a server that dies is restarted on the same port and data directory
(keel_stream.dev.servers). A broker restart holds the projections worker and the relay until the
topics are back and aligned with the ledger again (a memory-only broker comes back empty), then
starts them. Whatever was started is stopped again on SIGINT/SIGTERM, whether start-up finished
or not: the services first, then the broker and PostgreSQL. The broker and the services are
armed to die with dev if it is SIGKILLed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Final

import structlog

from keel_stream.dev.addresses import remove_addresses, write_addresses
from keel_stream.dev.components import child_environment, free_port, metrics_ports
from keel_stream.dev.lock import dev_lock
from keel_stream.dev.pids import sweep_leftovers
from keel_stream.dev.readiness import Readiness, wait_api_answers, wait_projector_live
from keel_stream.dev.resume import align_with_broker, realign
from keel_stream.dev.servers import Embedded, ServerHooks, embedded_servers, watch_servers
from keel_stream.dev.services import Services
from keel_stream.dev.signals import remember_stop_signals, signals_remembered, until_signalled
from keel_stream.kafka.admin import apply_catalog
from keel_stream.kafka.errors import kafka_translated
from keel_stream.kafka.settings import KafkaSettings, kafka_settings
from keel_stream.logs import get_logger
from keel_stream.settings import KeelSettings, env_var
from keel_stream.store import opened_store
from keel_stream.store.admin import migrate_database, migration_summary
from keel_stream.topics.groups import projector_group

__all__ = ["DEV_TENANT", "DID_NOT_START", "supervise"]

DEV_TENANT = "dev"
DID_NOT_START = 1
"""supervise's exit status when a service exited (or the API never answered) before "ready"."""
LIVE_TIMEOUT_S: Final = 120.0
"""How long dev waits for the API, then for the projections worker (it says ready without it)."""
BROKER_CLIENTS: Final = ("projector", "relay", "hooks")
"""Held while the broker restarts: they must not meet it before its topics are back."""

Say = Callable[[str], None]


def supervise(settings: KeelSettings, environ: Mapping[str, str], *, once: bool, say: Say) -> int:
    """Run the platform until SIGINT/SIGTERM (or, with once, report and stop); return the exit
    status. DevAlreadyRunning, before anything starts, when another dev holds the data dir.
    The children inherit ``environ`` with the KEEL_* settings dev resolved."""
    log = get_logger("dev")
    with dev_lock(settings.data_dir):
        swept = sweep_leftovers(settings.data_dir)
        if swept.stopped:
            log.info("stopped what a previous dev left running", processes=swept.stopped)
        if swept.left:
            log.error("a previous dev's processes did not stop", processes=swept.left)
        embedded = embedded_servers(settings, log)
        # The thread that restarts servers lives until they are stopped (parent-death signal).
        with (
            signals_remembered() as asked_to_stop,
            ThreadPoolExecutor(1, thread_name_prefix="dev-servers") as executor,
        ):
            try:
                dsn, servers = embedded.start(settings)
                platform = _Platform(settings, environ, dsn, servers, embedded, executor, say, log)
                return asyncio.run(
                    until_signalled(
                        lambda stop: platform.run(stop, once=once),
                        already=asked_to_stop.is_set(),
                    )
                )
            finally:
                # asyncio put the default handlers back when its loop closed: remember again.
                remember_stop_signals(asked_to_stop)
                remove_addresses(settings.data_dir)
                if embedded.stop():
                    embedded.pids.clear()


@dataclass
class _Platform:
    settings: KeelSettings
    environ: Mapping[str, str]
    dsn: str
    servers: str
    embedded: Embedded
    executor: Executor
    say: Say
    log: structlog.stdlib.BoundLogger

    @property
    def kafka(self) -> KafkaSettings:
        return kafka_settings(self.settings, self.servers)

    async def run(self, stop: asyncio.Event, *, once: bool) -> int:
        settings, say = self.settings, self.say
        say(migration_summary(await migrate_database(self.dsn)))
        async with kafka_translated("apply topics"):
            topics = await apply_catalog(self.kafka, settings.topic_prefix)
        say(f"database: {self.dsn}")
        say(f"kafka: {self.servers} (topics: {len(topics.created)} created)")
        async with opened_store(self.dsn, max_size=1) as store:
            resumed = await align_with_broker(
                store, self.kafka, settings.topic_prefix, topics.created, settings.data_dir
            )
            say(f"broker: {resumed.summary()}")
            if once:
                return 0
            key = await store.admin().ensure_key(
                DEV_TENANT, "keel-stream dev", settings.dev_api_key
            )
        return await self._serve(stop, key)

    async def _serve(self, stop: asyncio.Event, key: str) -> int:
        settings = self.settings
        api_port = settings.api_port or free_port(settings.api_host)
        api_url = f"http://{settings.api_host}:{api_port}"
        env = child_environment(settings, self.dsn, self.servers, api_port, self.environ)
        services = Services(env, metrics_ports(settings), self.embedded.pids, self.log)
        try:
            await services.start(self.say)
            status = await self._until_ready(services, stop, api_url)
            if status is not None:
                return status
            self.say(f"api: {api_url}")
            self.say(f"api key: {key}")
            self._write_addresses(api_url)
            self.say("ready; Ctrl-C or SIGTERM stops")
            running = _Running(self, services, api_url)
            hooks = ServerHooks(running.broker_down, running.broker_up, running.postgres_up)
            await asyncio.gather(
                services.supervise(stop),
                watch_servers(self.embedded, stop, hooks, self.executor, self.log),
            )
            return 0
        finally:
            await services.stop()

    def _write_addresses(self, api_url: str) -> None:
        write_addresses(
            self.settings.data_dir,
            database_url=self.dsn,
            kafka_bootstrap=self.servers,
            api_url=api_url,
        )

    async def _until_ready(
        self, services: Services, stop: asyncio.Event, api_url: str
    ) -> int | None:
        """None once the platform is ready; else the exit status (0: asked to stop)."""
        unless = [*services.exits(), asyncio.ensure_future(stop.wait())]
        group = projector_group(self.settings.topic_prefix)
        try:
            api = await wait_api_answers(api_url, unless, LIVE_TIMEOUT_S)
            projector = Readiness.ENDED
            if api is Readiness.LIVE:
                projector = await wait_projector_live(self.kafka, group, unless, LIVE_TIMEOUT_S)
        finally:
            for future in unless:
                future.cancel()
        if stop.is_set():
            return 0
        if api is Readiness.TIMED_OUT:
            self.log.error("the API did not answer", url=api_url, waited_s=LIVE_TIMEOUT_S)
            return DID_NOT_START
        if Readiness.ENDED in (api, projector):
            self.log.error("a service exited before dev was ready", exited=services.exited())
            return DID_NOT_START
        if projector is Readiness.TIMED_OUT:
            self.log.warning("the projections worker is not live yet; read models may lag")
        return None


@dataclass
class _Running:
    """What the platform does when a server it started comes back."""

    platform: _Platform
    services: Services
    api_url: str

    async def broker_down(self) -> None:
        await self.services.hold(BROKER_CLIENTS)

    async def broker_up(self, servers: str) -> None:
        """Apply the catalog, realign the offsets and the topics with the ledger, release the
        held services (a failure raises: the broker is restarted again)."""
        platform = self.platform
        settings = platform.settings
        async with opened_store(platform.dsn, max_size=1) as store:
            resumed, drift = await realign(
                store,
                kafka_settings(settings, servers),
                settings.topic_prefix,
                settings.data_dir,
                emptied=platform.embedded.memory_only,
            )
        platform.log.info("broker realigned", summary=resumed.summary())
        if drift:
            platform.log.warning("the topics differ from the catalog", drift=drift)
        self.services.release(BROKER_CLIENTS)

    async def postgres_up(self, dsn: str) -> None:
        platform = self.platform
        if dsn == platform.dsn:
            return  # the services reconnect (or exit and are restarted)
        platform.log.warning("PostgreSQL came back at another address", database_url=dsn)
        platform.dsn = dsn
        self.services.set_env(env_var("database_url"), dsn)
        platform._write_addresses(self.api_url)
        await self.services.restart_all()
