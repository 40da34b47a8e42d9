"""Operations and discovery: liveness, readiness, metrics, and what this build can do."""

from __future__ import annotations

from typing import Final

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest

from keel_stream import __version__
from keel_stream.api.deps import ApiConfig, Config, Svc
from keel_stream.api.errors import ErrorBody
from keel_stream.api.models import Capabilities
from keel_stream.api.readiness import Readiness
from keel_stream.api.sessions import SESSIONS_PAGE_DEFAULT, SESSIONS_PAGE_MAX
from keel_stream.api.subagents import SUBAGENTS_PAGE_MAX
from keel_stream.hooks import HOOK_NAMES
from keel_stream.metrics import Component, exported
from keel_stream.store import MAX_READ_LIMIT
from keel_stream.store.service_heartbeats import ServiceKind
from keel_stream.topics.groups import projector_group

__all__ = ["router"]

router = APIRouter()

STREAMS: Final = Gauge("keel_api_sse_streams", "Open SSE streams")


@router.get("/healthz", tags=["ops"])
async def healthz() -> dict[str, str]:
    """Liveness: the process serves requests."""
    return {"status": "ok"}


def _readiness(request: Request, config: ApiConfig) -> Readiness:
    readiness = getattr(request.app.state, "readiness", None)
    if not isinstance(readiness, Readiness):
        readiness = Readiness(config.kafka, projector_group(config.topic_prefix))
        request.app.state.readiness = readiness
    return readiness


@router.get("/readyz", tags=["ops"], responses={503: {"model": ErrorBody}})
async def readyz(request: Request, services: Svc, config: Config) -> JSONResponse:
    """Readiness: 503 unless the database answers and is migrated and, with a broker, the read
    models have been live on it (the projections worker's group). The body reports each
    dependency now: `dependencies.database`, `.kafka` (the broker answers), `.readModels`, and
    `.hooksSender` / `.triggerScheduler` (`running` or `missing`; never a reason for 503)."""
    report = await _readiness(request, config).report(
        services.sessions, services.hub.kafka_connected, await services.presence.running()
    )
    if report.ready:
        return JSONResponse(report.body)
    return JSONResponse(report.body, status_code=503, headers={"Retry-After": "1"})


@router.get("/metrics", tags=["ops"], response_class=PlainTextResponse)
async def metrics(services: Svc) -> Response:
    """Prometheus metrics of the components this process runs."""
    STREAMS.set(services.hub.streams)
    registry = exported(default=(Component.API, Component.GATEWAY))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/capabilities", response_model=Capabilities, tags=["v1"])
async def capabilities(services: Svc, config: Config) -> Capabilities:
    """What this deployment can do now; clients downgrade on false flags. `partials` is true
    only while a broker is configured and the live source reads keel.partials.v1; `hooks` and
    `triggers` only while a hooks sender / trigger scheduler beats (keel_stream.api.presence)."""
    running = await services.presence.running()
    return Capabilities(
        service_version=f"keel-stream/{__version__}",
        features={
            "decisions": True,
            "hooks": running.count(ServiceKind.HOOKS_SENDER) > 0,
            "partials": config.kafka is not None and services.hub.partials_live,
            "plugins": True,
            "sessions.cancel": True,
            "sessions.list": True,
            "settings.models": True,
            "settings.secrets": False,
            "subagents": True,
            "triggers": running.count(ServiceKind.TRIGGER_SCHEDULER) > 0,
        },
        limits={
            "sessionsPageDefault": SESSIONS_PAGE_DEFAULT,
            "sessionsPageMax": SESSIONS_PAGE_MAX,
            "eventsPageMax": MAX_READ_LIMIT,
            "subagentsPageMax": SUBAGENTS_PAGE_MAX,
        },
        hooks=list(HOOK_NAMES),
    )
