"""Operations and discovery: liveness, readiness, metrics, and what this build can do."""

from __future__ import annotations

from typing import Any, Final

from fastapi import APIRouter, Response
from fastapi.responses import PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest

from keel_stream import __version__
from keel_stream.api.deps import Config, Svc
from keel_stream.api.errors import ErrorBody
from keel_stream.api.models import Capabilities
from keel_stream.api.sessions import SESSIONS_PAGE_DEFAULT, SESSIONS_PAGE_MAX
from keel_stream.errors import StoreError, StoreUnavailable
from keel_stream.store import MAX_READ_LIMIT

__all__ = ["router"]

router = APIRouter()

STREAMS: Final = Gauge("keel_api_sse_streams", "Open SSE streams")


@router.get("/healthz", tags=["ops"])
async def healthz() -> dict[str, str]:
    """Liveness: the process serves requests."""
    return {"status": "ok"}


@router.get("/readyz", tags=["ops"], responses={503: {"model": ErrorBody}})
async def readyz(services: Svc) -> dict[str, Any]:
    """Readiness: the database answers and the schema is migrated (503 otherwise). `kafka`
    reports whether the live Kafka source is connected; streams work without it."""
    try:
        version = await services.sessions.schema_version()
    except StoreError as exc:
        raise StoreUnavailable(f"not ready: {exc.message}") from exc
    if version is None:
        raise StoreUnavailable("not ready: the schema is not migrated")
    return {"status": "ready", "schemaVersion": version, "kafka": services.hub.kafka_connected}


@router.get("/metrics", tags=["ops"], response_class=PlainTextResponse)
async def metrics(services: Svc) -> Response:
    """Prometheus metrics."""
    STREAMS.set(services.hub.streams)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


@router.get("/v1/capabilities", response_model=Capabilities, tags=["v1"])
async def capabilities(services: Svc, config: Config) -> Capabilities:
    """What this build supports; clients downgrade on false flags. `partials` is true only
    while a broker is configured and the live source reads keel.partials.v1."""
    return Capabilities(
        service_version=f"keel-stream/{__version__}",
        features={
            "decisions": False,
            "hooks": False,
            "partials": bool(config.bootstrap) and services.hub.partials_live,
            "plugins": False,
            "sessions.cancel": True,
            "sessions.list": True,
            "settings.models": True,
            "settings.secrets": False,
            "subagents": False,
            "triggers": False,
        },
        limits={
            "sessionsPageDefault": SESSIONS_PAGE_DEFAULT,
            "sessionsPageMax": SESSIONS_PAGE_MAX,
            "eventsPageMax": MAX_READ_LIMIT,
        },
        hooks=[],
    )
