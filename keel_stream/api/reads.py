"""Reading a session: its events (a page, or the SSE stream) and its read models."""

from __future__ import annotations

import re
from typing import Annotated, Final

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse

from keel_stream.api.deps import ERRORS, Config, Services, Svc, Tenant, session_row
from keel_stream.api.models import EventPage, EventView, ReadModel
from keel_stream.api.sse import session_stream
from keel_stream.errors import InvalidPage
from keel_stream.store import MAX_READ_LIMIT

__all__ = ["MAX_SEQ", "router"]

MAX_SEQ: Final = 2**63 - 1
EVENTS_PAGE_DEFAULT: Final = 100
_SEQ: Final = re.compile(r"[0-9]{1,19}")
MinSeq = Annotated[
    int, Query(ge=0, le=MAX_SEQ, description="Wait until the model includes this seq.")
]
Wait = Annotated[float, Query(ge=0, le=10, description="How long to wait for min_seq.")]
AtSeq = Annotated[
    int | None,
    Query(
        alias="atSeq",
        ge=0,
        le=MAX_SEQ,
        description="The model as of this seq: the fold of the session's first atSeq events.",
    ),
]

router = APIRouter(tags=["v1"])


@router.get("/v1/sessions/{session_id}/events", response_model=EventPage, responses=ERRORS)
async def get_events(
    services: Svc,
    tenant: Tenant,
    session_id: str,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_READ_LIMIT)] = EVENTS_PAGE_DEFAULT,
) -> EventPage:
    """Committed events with seq > after, at most limit, with the cursor to go on."""
    events = await services.ledger.read_events(tenant, session_id, after=after, limit=limit)
    return EventPage(
        events=[
            EventView(
                seq=e.seq,
                kind=e.kind,
                payload=e.payload,
                committed_at=e.committed_at,
                metadata=e.metadata,
            )
            for e in events
        ],
        next_cursor=events[-1].seq if len(events) == limit else None,
    )


@router.get(
    "/v1/sessions/{session_id}/events/stream",
    responses={**ERRORS, 200: {"content": {"text/event-stream": {}}}},
    response_class=StreamingResponse,
)
async def stream_events(
    services: Svc,
    config: Config,
    tenant: Tenant,
    session_id: str,
    after: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
    partials: Annotated[int, Query(ge=0, le=1)] = 0,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    """SSE: catch-up from the ledger, then live; `id:` is the seq (resume with Last-Event-ID
    or after); `partials=1` adds `event: partial` frames without an id, never after the
    committed assistant.message of their generation."""
    await session_row(services, tenant, session_id)
    cursor = after if after is not None else 0
    if last_event_id is not None:
        if not _SEQ.fullmatch(last_event_id) or int(last_event_id) > MAX_SEQ:
            raise InvalidPage("Last-Event-ID must be a seq")
        cursor = int(last_event_id)
    body = session_stream(
        services.ledger,
        services.hub,
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


@router.get("/v1/sessions/{session_id}/transcript", response_model=ReadModel, responses=ERRORS)
async def transcript(
    services: Svc,
    tenant: Tenant,
    session_id: str,
    min_seq: MinSeq = 0,
    wait_s: Wait = 5.0,
    at_seq: AtSeq = None,
) -> ReadModel:
    """The transcript read model (entries and the model context); with atSeq, as it was then."""
    return await _read_model(services, "transcript", tenant, session_id, min_seq, wait_s, at_seq)


@router.get("/v1/sessions/{session_id}/status", response_model=ReadModel, responses=ERRORS)
async def status(
    services: Svc,
    tenant: Tenant,
    session_id: str,
    min_seq: MinSeq = 0,
    wait_s: Wait = 5.0,
    at_seq: AtSeq = None,
) -> ReadModel:
    """The run-status read model; with atSeq, as it was then."""
    return await _read_model(services, "run_status", tenant, session_id, min_seq, wait_s, at_seq)


async def _read_model(
    services: Services,
    projection: str,
    tenant: str,
    session_id: str,
    min_seq: int,
    wait_s: float,
    at_seq: int | None,
) -> ReadModel:
    if at_seq is not None:
        if min_seq:
            raise InvalidPage("min_seq waits for the live model; atSeq reads the past: not both")
        view = await services.models.as_of(projection, tenant, session_id, at_seq)
    else:
        view = await services.models.get(
            projection, tenant, session_id, min_seq=min_seq, timeout_s=wait_s
        )
    return ReadModel(last_seq=view.last_seq, state=view.state)
