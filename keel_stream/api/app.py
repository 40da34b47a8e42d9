"""The AgentAPI application: /v1 REST and SSE over the ledger and the read models.

The routes live in one router per concern (ops, sessions, submissions, runs, reads); this
module builds the app and owns the process's services (created at start-up, closed at exit).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from keel_stream import __version__
from keel_stream.api import (
    decisions,
    external,
    hooks,
    ops,
    plugins,
    reads,
    runs,
    sessions,
    subagents,
    submissions,
    tenant_config,
    triggers,
)
from keel_stream.api.access_log import AccessLog
from keel_stream.api.console import pages as console
from keel_stream.api.deps import ApiConfig, Services
from keel_stream.api.errors import install_error_handlers
from keel_stream.api.hub import LiveHub
from keel_stream.api.limits import BodyLimit
from keel_stream.api.presence import Presence
from keel_stream.api.tenant_limits import SlotRelease, TenantGuard
from keel_stream.gateway.agents import ExternalAgents
from keel_stream.gateway.event_rate import EventLimits
from keel_stream.hooks.egress import EgressPolicy
from keel_stream.hooks.service import HookService, tenant_hosts
from keel_stream.readmodels import ReadModels
from keel_stream.store import Database, Ledger, open_store
from keel_stream.store.external_sessions import ExternalSessions
from keel_stream.store.tenant_configs import TenantConfigs
from keel_stream.tenancy.document import TenantConfig
from keel_stream.triggers.service import TriggerService
from keel_stream.worker.agent_settings import TenantConfigCache

__all__ = ["ApiConfig", "create_app"]


def _external_agents(
    config: ApiConfig,
    ledger: Ledger,
    sessions: ExternalSessions,
    configs: TenantConfigs,
    boot: TenantConfig | None,
) -> ExternalAgents:
    limits = config.tenant_limits
    return ExternalAgents(
        ledger,
        sessions,
        configs,
        boot,
        environ=config.environ,
        data_dir=config.data_dir,
        max_line_bytes=config.rpc_max_line_bytes,
        event_limits=EventLimits(limits.backend_events_per_second, limits.backend_flood_grace_s),
    )


def create_app(config: ApiConfig) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = await open_store(config.database_url, min_size=2, max_size=20)
        services = _services(config, store)
        await services.hub.start()
        await services.models.start()
        await services.external.start()
        app.state.services = services
        try:
            yield
        finally:
            config.draining.set()
            await services.external.stop()
            await services.models.close()
            await services.hub.stop()
            await store.close()

    app = FastAPI(
        title="keel-stream AgentAPI",
        version=__version__,
        lifespan=lifespan,
        description="The Keel Core event ledger: sessions, input, events, SSE, read models.",
    )
    app.state.config = config
    install_error_handlers(app)
    app.add_middleware(BodyLimit, limits=config.limits)  # inside the access log: 413/408 logged
    app.add_middleware(AccessLog)
    app.add_middleware(SlotRelease)  # outermost: a slot is given back once the response ended
    _include_routers(app)
    return app


def _services(config: ApiConfig, store: Database) -> Services:
    """Everything a request may use, on one store; the caller starts and stops what runs."""
    ledger = store.ledger()
    configs = store.tenant_configs()
    boot = config.boot_config
    settings = config.settings
    return Services(
        ledger=ledger,
        sessions=store.sessions(),
        keys=store.keys(),
        models=ReadModels.of(store),
        runs=store.runs("api", 1),
        hub=LiveHub(store, config.kafka, config.topic_prefix),
        tenant_configs=configs,
        external=_external_agents(config, ledger, store.external_sessions(), configs, boot),
        ops=store.ops(),
        projections=store.projections(),
        deadlines=store.deadlines(),
        subagents=store.subagents(),
        hooks=HookService(
            store.hooks(),
            EgressPolicy.parse(settings.hooks_allowed_hosts),
            tenant_hosts=tenant_hosts(TenantConfigCache(configs, boot, ttl_s=0.0)),
        ),
        triggers=TriggerService.create(store, settings),
        presence=Presence(store.service_heartbeats()),
        guard=TenantGuard(config.tenant_limits, configs),
    )


def _include_routers(app: FastAPI) -> None:
    """The routers and the console's static files, in order."""
    for router in (ops.router, sessions.router, submissions.router, reads.router, runs.router):
        app.include_router(router)
    app.include_router(tenant_config.router)
    app.include_router(external.router)
    app.include_router(hooks.router)
    app.include_router(decisions.router)
    app.include_router(plugins.router)
    app.include_router(subagents.router)
    app.include_router(triggers.router)
    app.include_router(console.router)
    app.mount("/console/static", console.STATIC, name="console-static")
