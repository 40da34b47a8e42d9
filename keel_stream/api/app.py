"""The AgentAPI application: /v1 REST and SSE over the ledger and the read models."""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Annotated, Any, Final

import asyncpg
from fastapi import Depends, FastAPI, Header, Query, Request, Response
from fastapi.responses import PlainTextResponse, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, Gauge, generate_latest

from keel_stream import __version__
from keel_stream.api.errors import (
    ErrorBody,
    NoRunningAttempt,
    Unauthorized,
    install_error_handlers,
)
from keel_stream.api.hub import LiveHub
from keel_stream.api.keys import KeyStore
from keel_stream.api.models import (
    CancelView,
    Capabilities,
    CreateSession,
    EventPage,
    EventRequest,
    EventView,
    ExternalView,
    InputRequest,
    ReadModel,
    RunQueued,
    RunView,
    SessionPage,
    SessionView,
    SubmissionView,
)
from keel_stream.api.sse import session_stream
from keel_stream.errors import (
    ExternalSession,
    InvalidPage,
    SessionNotFound,
    StoreError,
    StoreUnavailable,
)
from keel_stream.kernel import CommitRequest, check_identifier, require_edge_kind
from keel_stream.readmodels import ReadModels
from keel_stream.store import MAX_READ_LIMIT, PostgresLedger, create_pool
from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query
from keel_stream.worker.runs import RunStore

__all__ = ["ApiConfig", "create_app"]

SESSIONS_PAGE_DEFAULT: Final = 50
SESSIONS_PAGE_MAX: Final = 200
EVENTS_PAGE_DEFAULT: Final = 100
STREAMS: Final = Gauge("keel_api_sse_streams", "Open SSE streams")
ERRORS: Final[dict[int | str, dict[str, Any]]] = {
    400: {"model": ErrorBody},
    401: {"model": ErrorBody},
    404: {"model": ErrorBody},
    409: {"model": ErrorBody},
    503: {"model": ErrorBody},
}


MAX_SEQ: Final = 2**63 - 1
_SEQ: Final = re.compile(r"[0-9]{1,19}")
_CURSOR: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
MinSeq = Annotated[
    int, Query(ge=0, le=MAX_SEQ, description="Wait until the model includes this seq.")
]
Wait = Annotated[float, Query(ge=0, le=10, description="How long to wait for min_seq.")]


@dataclass
class ApiConfig:
    database_url: str
    bootstrap: str | None = None
    topic_prefix: str = ""
    heartbeat_s: float = 15.0
    draining: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the process drains (SIGTERM): streams send what is unread, then `drain`."""


@dataclass
class _Services:
    pool: asyncpg.Pool
    ledger: PostgresLedger
    keys: KeyStore
    models: ReadModels
    runs: RunStore
    hub: LiveHub


def _session_view(row: asyncpg.Record) -> SessionView:
    external = None
    if row["state_owner"] == "external":
        external = ExternalView(
            backend=row["external_backend"],
            ref=row["external_ref"],
            status=row["external_status"],
            metering=row["metering"],
        )
    return SessionView(
        id=row["session_id"],
        last_seq=row["last_seq"],
        state_owner=row["state_owner"],
        created_at=row["created_at"],
        run=RunView(
            status=row["run_status"],
            attempts=row.get("attempts") if "attempts" in row else None,
            epoch=row.get("lease_epoch") if "lease_epoch" in row else None,
        ),
        external=external,
    )


async def tenant_of(request: Request, authorization: Annotated[str | None, Header()] = None) -> str:
    """The tenant of the request's API key (`Authorization: Bearer <key>`)."""
    scheme, _, key = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key:
        raise Unauthorized("send Authorization: Bearer <api key>")
    keys: KeyStore = request.app.state.keys
    tenant = await keys.tenant_for(key.strip())
    if tenant is None:
        raise Unauthorized("unknown or revoked API key")
    return tenant


Tenant = Annotated[str, Depends(tenant_of)]


def create_app(config: ApiConfig) -> FastAPI:
    services: dict[str, _Services] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await create_pool(config.database_url, min_size=2, max_size=20)
        hub = LiveHub(pool, config.bootstrap, config.topic_prefix)
        models = ReadModels(pool)
        await hub.start()
        await models.start()
        services["s"] = _Services(
            pool, PostgresLedger(pool), KeyStore(pool), models, RunStore(pool, "api", 1), hub
        )
        app.state.keys = services["s"].keys
        try:
            yield
        finally:
            config.draining.set()
            await models.close()
            await hub.stop()
            await pool.close()

    app = FastAPI(
        title="keel-stream AgentAPI",
        version=__version__,
        lifespan=lifespan,
        description="The Keel Core event ledger: sessions, input, events, SSE, read models.",
    )
    install_error_handlers(app)

    def svc() -> _Services:
        return services["s"]

    async def session_row(tenant: str, session_id: str) -> asyncpg.Record:
        check_identifier(session_id, "session")
        async with translated("read session"):
            row = await svc().pool.fetchrow(query("get_session"), tenant, session_id)
        if row is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        return row

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process serves requests."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], responses={503: {"model": ErrorBody}})
    async def readyz() -> dict[str, Any]:
        """Readiness: the database answers and the schema is migrated (503 otherwise). `kafka`
        reports whether the live Kafka source is connected; streams work without it."""
        try:
            async with translated("ready check"):
                version = await svc().pool.fetchval(
                    "SELECT max(version) FROM keel_schema_migrations"
                )
        except StoreError as exc:
            raise StoreUnavailable(f"not ready: {exc.message}") from exc
        if version is None:
            raise StoreUnavailable("not ready: the schema is not migrated")
        return {"status": "ready", "schemaVersion": version, "kafka": svc().hub.kafka_connected}

    @app.get("/metrics", tags=["ops"], response_class=PlainTextResponse)
    async def metrics() -> Response:
        """Prometheus metrics."""
        STREAMS.set(svc().hub.streams)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/capabilities", response_model=Capabilities, tags=["v1"])
    async def capabilities() -> Capabilities:
        """What this build supports; clients downgrade on false flags."""
        return Capabilities(
            service_version=f"keel-stream/{__version__}",
            features={
                "decisions": False,
                "hooks": False,
                "partials": True,
                "plugins": False,
                "sessions.cancel": True,
                "sessions.list": True,
                "settings.models": False,
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

    @app.post(
        "/v1/sessions", status_code=201, response_model=SessionView, tags=["v1"], responses=ERRORS
    )
    async def create_session(tenant: Tenant, body: CreateSession | None = None) -> SessionView:
        """Open a native session (the id is generated unless given)."""
        session_id = await svc().ledger.create_session(tenant, body.id if body else None)
        return _session_view(await session_row(tenant, session_id))

    @app.get("/v1/sessions", response_model=SessionPage, tags=["v1"], responses=ERRORS)
    async def list_sessions(
        tenant: Tenant,
        limit: Annotated[int, Query(ge=1, le=SESSIONS_PAGE_MAX)] = SESSIONS_PAGE_DEFAULT,
        cursor: Annotated[str | None, Query(max_length=128, pattern=_CURSOR)] = None,
    ) -> SessionPage:
        """The tenant's sessions by id; pass nextCursor as cursor for the next page."""
        async with translated("list sessions"):
            rows = await svc().pool.fetch(query("list_sessions"), tenant, cursor, limit + 1)
        page = [_session_view(r) for r in rows[:limit]]
        more = len(rows) > limit
        return SessionPage(sessions=page, next_cursor=page[-1].id if more and page else None)

    @app.get("/v1/sessions/{session_id}", response_model=SessionView, tags=["v1"], responses=ERRORS)
    async def get_session(tenant: Tenant, session_id: str) -> SessionView:
        return _session_view(await session_row(tenant, session_id))

    @app.post(
        "/v1/sessions/{session_id}/cancel",
        response_model=CancelView,
        tags=["v1"],
        responses=ERRORS,
    )
    async def cancel(tenant: Tenant, session_id: str) -> CancelView:
        """Stop the running attempt (its input stays unanswered for the next run)."""
        await session_row(tenant, session_id)
        if not await svc().runs.request_cancel(tenant, session_id):
            raise NoRunningAttempt(f"session {session_id!r} has no running attempt")
        return CancelView(cancel_requested=True)

    async def _submit(
        tenant: str, session_id: str, payload: dict[str, Any], key: str | None, response: Response
    ) -> SubmissionView:
        request_id = key or str(payload.get("requestId") or uuid.uuid4())
        submission = await svc().ledger.commit(
            CommitRequest(
                tenant_id=tenant,
                session_id=session_id,
                kind="user.message",
                payload=payload,
                key=request_id,
            )
        )
        response.status_code = 201 if submission.created else 200
        delivery = None
        if payload.get("delivery") is not None:
            (event,) = await svc().ledger.read_events(
                tenant, session_id, after=submission.seq - 1, limit=1
            )
            delivery = event.payload.get("delivery")
        return SubmissionView(
            created=submission.created,
            request_id=request_id,
            seq=submission.seq,
            kind=submission.kind,
            delivery=delivery,
            committed_at=submission.committed_at,
        )

    @app.post(
        "/v1/sessions/{session_id}/input",
        status_code=201,
        response_model=SubmissionView,
        tags=["v1"],
        responses={**ERRORS, 200: {"model": SubmissionView, "description": "A retry"}},
    )
    async def post_input(
        tenant: Tenant, session_id: str, body: InputRequest, response: Response
    ) -> SubmissionView:
        """Commit a user message; the same requestId again returns the same submission."""
        payload = body.model_dump(by_alias=True, exclude_none=True)
        return await _submit(tenant, session_id, payload, body.request_id, response)

    @app.post(
        "/v1/sessions/{session_id}/events",
        status_code=201,
        response_model=SubmissionView,
        tags=["v1"],
        responses={**ERRORS, 200: {"model": SubmissionView, "description": "A retry"}},
    )
    async def post_event(
        tenant: Tenant, session_id: str, body: EventRequest, response: Response
    ) -> SubmissionView:
        """Commit an edge event: only user.message is accepted here."""
        require_edge_kind(body.kind)
        return await _submit(tenant, session_id, dict(body.payload), body.request_id, response)

    @app.get(
        "/v1/sessions/{session_id}/events", response_model=EventPage, tags=["v1"], responses=ERRORS
    )
    async def get_events(
        tenant: Tenant,
        session_id: str,
        after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_READ_LIMIT)] = EVENTS_PAGE_DEFAULT,
    ) -> EventPage:
        """Committed events with seq > after, at most limit, with the cursor to go on."""
        events = await svc().ledger.read_events(tenant, session_id, after=after, limit=limit)
        return EventPage(
            events=[
                EventView(seq=e.seq, kind=e.kind, payload=e.payload, committed_at=e.committed_at)
                for e in events
            ],
            next_cursor=events[-1].seq if len(events) == limit else None,
        )

    @app.get(
        "/v1/sessions/{session_id}/events/stream",
        tags=["v1"],
        responses={**ERRORS, 200: {"content": {"text/event-stream": {}}}},
        response_class=StreamingResponse,
    )
    async def stream_events(
        request: Request,
        tenant: Tenant,
        session_id: str,
        after: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
        partials: Annotated[int, Query(ge=0, le=1)] = 0,
        last_event_id: Annotated[str | None, Header()] = None,
    ) -> StreamingResponse:
        """SSE: catch-up from the ledger, then live; `id:` is the seq (resume with
        Last-Event-ID or after); `partials=1` adds `event: partial` frames without an id."""
        await session_row(tenant, session_id)
        cursor = after if after is not None else 0
        if last_event_id is not None:
            if not _SEQ.fullmatch(last_event_id) or int(last_event_id) > MAX_SEQ:
                raise InvalidPage("Last-Event-ID must be a seq")
            cursor = int(last_event_id)
        body = session_stream(
            svc().ledger,
            svc().hub,
            tenant,
            session_id,
            after=cursor,
            partials=bool(partials),
            draining=config.draining,
            heartbeat_s=config.heartbeat_s,
        )
        return StreamingResponse(
            body,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.post(
        "/v1/sessions/{session_id}/run",
        status_code=202,
        response_model=RunQueued,
        tags=["v1"],
        responses=ERRORS,
    )
    async def queue_run(tenant: Tenant, session_id: str) -> RunQueued:
        """Queue a run without new input (refused for an external session)."""
        row = await session_row(tenant, session_id)
        if row["state_owner"] == "external":
            raise ExternalSession(f"session {session_id!r} is owned externally")
        async with translated("queue run"):
            status = await svc().pool.fetchval(query("queue_run"), tenant, session_id)
        return RunQueued(status=str(status))

    async def _read_model(
        name: str, tenant: str, session_id: str, min_seq: int, timeout_s: float
    ) -> ReadModel:
        view = await svc().models.get(
            name, tenant, session_id, min_seq=min_seq, timeout_s=timeout_s
        )
        return ReadModel(last_seq=view.last_seq, state=view.state)

    @app.get(
        "/v1/sessions/{session_id}/transcript",
        response_model=ReadModel,
        tags=["v1"],
        responses=ERRORS,
    )
    async def transcript(
        tenant: Tenant, session_id: str, min_seq: MinSeq = 0, wait_s: Wait = 5.0
    ) -> ReadModel:
        """The transcript read model (entries and the model context)."""
        return await _read_model("transcript", tenant, session_id, min_seq, wait_s)

    @app.get(
        "/v1/sessions/{session_id}/status", response_model=ReadModel, tags=["v1"], responses=ERRORS
    )
    async def status(
        tenant: Tenant, session_id: str, min_seq: MinSeq = 0, wait_s: Wait = 5.0
    ) -> ReadModel:
        """The run-status read model."""
        return await _read_model("run_status", tenant, session_id, min_seq, wait_s)

    return app
