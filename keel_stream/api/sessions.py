"""Sessions: open one, list the tenant's, read one."""

from __future__ import annotations

from typing import Annotated, Final, Literal

from fastapi import APIRouter, Query

from keel_stream.api.deps import ERRORS, Svc, Tenant, session_row, session_view
from keel_stream.api.models import CreateSession, SessionPage, SessionView
from keel_stream.errors import InvalidRequest

__all__ = ["SESSIONS_PAGE_DEFAULT", "SESSIONS_PAGE_MAX", "router"]

SESSIONS_PAGE_DEFAULT: Final = 50
SESSIONS_PAGE_MAX: Final = 200
_CURSOR: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"

router = APIRouter(tags=["v1"])


@router.post("/v1/sessions", status_code=201, response_model=SessionView, responses=ERRORS)
async def create_session(
    services: Svc, tenant: Tenant, body: CreateSession | None = None
) -> SessionView:
    """Open a session (the id is generated unless given): native, or with `backend` an
    external one, opened at that backend (session.open) within the tenant's quota, or with
    `forkOf` a fork of one of the tenant's sessions: a copy of its first `atSeq` events (the
    head by default), with provenance in each copy's metadata; it owes a run only when that
    prefix leaves a turn to take (an unanswered input, or a last answer that failed or asked
    for tools)."""
    await services.guard.count(tenant, "sessions")
    if body is not None and body.fork_of is not None:
        if body.backend is not None or body.metadata is not None:
            raise InvalidRequest("forkOf copies a native session: give no backend or metadata")
        fork = await services.ledger.fork(
            tenant, body.fork_of, at_seq=body.at_seq, session_id=body.id
        )
        session_id = fork.session_id
    elif body is not None and body.at_seq is not None:
        raise InvalidRequest("atSeq is where a fork starts: give forkOf too")
    elif body is not None and body.backend is not None:
        session_id = await services.external.open(tenant, body.id, body.backend, body.metadata)
    elif body is not None and body.metadata is not None:
        raise InvalidRequest("metadata is passed to an external backend: give a backend too")
    else:
        session_id = await services.ledger.create_session(tenant, body.id if body else None)
    return session_view(await session_row(services, tenant, session_id))


@router.get("/v1/sessions", response_model=SessionPage, responses=ERRORS)
async def list_sessions(
    services: Svc,
    tenant: Tenant,
    limit: Annotated[int, Query(ge=1, le=SESSIONS_PAGE_MAX)] = SESSIONS_PAGE_DEFAULT,
    cursor: Annotated[str | None, Query(max_length=128, pattern=_CURSOR)] = None,
    status: Annotated[
        Literal["pending", "running", "done", "failed", "none"] | None,
        Query(description="Only sessions whose run has this status (none: never had a run)."),
    ] = None,
    owner: Annotated[
        Literal["keel", "external"] | None,
        Query(description="Only native (keel) or external sessions."),
    ] = None,
) -> SessionPage:
    """The tenant's sessions by id; pass nextCursor as cursor for the next page (with the same
    filters)."""
    rows = await services.sessions.page(
        tenant, cursor, limit + 1, run_status=status, state_owner=owner
    )
    page = [session_view(r) for r in rows[:limit]]
    more = len(rows) > limit
    return SessionPage(sessions=page, next_cursor=page[-1].id if more and page else None)


@router.get("/v1/sessions/{session_id}", response_model=SessionView, responses=ERRORS)
async def get_session(services: Svc, tenant: Tenant, session_id: str) -> SessionView:
    return session_view(await session_row(services, tenant, session_id))
