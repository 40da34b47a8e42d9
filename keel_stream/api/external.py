"""External sessions through the API: input delivered to the backend, cancel, close, and the
tenant's view of its backends.  Opening is `POST /v1/sessions {"backend": ...}` (sessions.py)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from keel_stream.api.deps import ERRORS, Services, Svc, Tenant, session_row, session_view
from keel_stream.api.models import CancelView, SessionView, SubmissionView
from keel_stream.errors import NoRunningAttempt, NotExternalSession
from keel_stream.gateway.agents import SessionMarkers
from keel_stream.kernel import StateOwner
from keel_stream.store.sessions import SessionRecord

__all__ = ["cancel_external", "deliver", "external_markers", "router"]

router = APIRouter(tags=["v1"])


def external_markers(record: SessionRecord) -> SessionMarkers | None:
    """(backend, ref, status) of an external session; None for a native one."""
    if record.state_owner != StateOwner.EXTERNAL or record.external_backend is None:
        return None
    return (record.external_backend, record.external_ref, record.external_status)


async def deliver(
    services: Services, tenant: str, session_id: str, payload: dict[str, Any], request_id: str
) -> SubmissionView:
    """Record an input to an external session and deliver it to its backend."""
    markers = external_markers(await session_row(services, tenant, session_id))
    if markers is None:
        raise NotExternalSession(f"session {session_id!r} is not external")
    delivered = await services.external.send(tenant, session_id, markers, payload, request_id)
    submission = delivered.submission
    return SubmissionView(
        created=submission.created,
        request_id=request_id,
        seq=submission.seq,
        kind=submission.kind,
        committed_at=submission.committed_at,
        turn_id=delivered.turn_id,
    )


async def cancel_external(
    services: Services, tenant: str, session_id: str, markers: SessionMarkers
) -> CancelView:
    outcome = await services.external.cancel(tenant, session_id, markers)
    if outcome is None:
        raise NoRunningAttempt(f"session {session_id!r} has no turn to cancel")
    return CancelView(cancel_requested=True, turn_id=outcome.turn_id, cancelled=outcome.cancelled)


@router.post("/v1/sessions/{session_id}/close", response_model=SessionView, responses=ERRORS)
async def close_session(services: Svc, tenant: Tenant, session_id: str) -> SessionView:
    """Close an external session at its backend and mark it closed (idempotent); 409
    `not_external_session` for a native session."""
    record = await session_row(services, tenant, session_id)
    markers = external_markers(record)
    if markers is None:
        raise NotExternalSession(f"session {session_id!r} is not external")
    await services.external.close(tenant, session_id, markers)
    return session_view(await session_row(services, tenant, session_id))


@router.get("/v1/external/backends", responses=ERRORS)
async def list_backends(services: Svc, tenant: Tenant) -> dict[str, Any]:
    """The backend connections serving this tenant: up or not, why not, session counts."""
    shown = [b for b in services.external.describe() if b["scope"] in ("boot", tenant)]
    return {"backends": shown}
