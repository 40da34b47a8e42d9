"""Runs through the API: `POST /run` (queue one when the session owes a turn) and `POST /cancel`.

`POST /run` answers what it did. A run is queued only when the session owes one: an input no
completed answer has consumed, or an owed turn (the latest answer failed or asked for tools),
judged by the kernel's input accounting over the session's log. A run queued with nothing owed
would only settle without a summary.
"""

from __future__ import annotations

from typing import Final

from fastapi import APIRouter, Response

from keel_stream.api.deps import ERRORS, Services, Svc, Tenant, session_row
from keel_stream.api.external import cancel_external, external_markers
from keel_stream.api.models import CancelView, RunQueued
from keel_stream.errors import ExternalSession, NoRunningAttempt
from keel_stream.kernel import InputAccount, InputTally, RunStatus, StateOwner
from keel_stream.store import MAX_READ_LIMIT

__all__ = ["input_account", "router"]

router = APIRouter(tags=["v1"])

_RUNNING: Final = RunStatus.RUNNING.value


async def input_account(
    services: Services, tenant: str, session_id: str, read_watermark: int
) -> InputAccount:
    """The session's input account, folded over its whole log page by page."""
    inputs = InputTally()
    after = 0
    while True:
        page = await services.ledger.read_events(
            tenant, session_id, after=after, limit=MAX_READ_LIMIT
        )
        inputs = inputs.observe_many(page)
        if len(page) < MAX_READ_LIMIT:
            return inputs.account(read_watermark)
        after = page[-1].seq


async def _request_run(services: Services, tenant: str, session_id: str) -> RunQueued:
    record = await session_row(services, tenant, session_id)
    if record.state_owner == StateOwner.EXTERNAL:
        raise ExternalSession(f"session {session_id!r} is owned externally")
    run = await services.sessions.run_of(tenant, session_id)
    status = None if run is None else run.status
    if status == _RUNNING:
        return RunQueued(queued=False, reason="already_running", status=status)
    account = await input_account(
        services, tenant, session_id, 0 if run is None else run.read_watermark
    )
    if not account.needs_turn:
        return RunQueued(queued=False, reason="nothing_owed", status=status)
    queued = await services.sessions.queue_run(tenant, session_id)
    if queued is None:
        raise ExternalSession(f"session {session_id!r} is owned externally")
    return RunQueued(queued=True, reason=None, status=queued)


@router.post(
    "/v1/sessions/{session_id}/run",
    status_code=202,
    response_model=RunQueued,
    responses={
        **ERRORS,
        200: {"model": RunQueued, "description": "Not queued: nothing owed or already running"},
    },
)
async def queue_run(
    services: Svc, tenant: Tenant, session_id: str, response: Response
) -> RunQueued:
    """Queue a run without new input when the session owes one (202, `queued: true`); else
    200 with `queued: false` and the reason: `nothing_owed` (no unanswered input, no owed
    turn) or `already_running`. Refused (409) for an external session."""
    answer = await _request_run(services, tenant, session_id)
    if not answer.queued:
        response.status_code = 200
    return answer


@router.post("/v1/sessions/{session_id}/cancel", response_model=CancelView, responses=ERRORS)
async def cancel(services: Svc, tenant: Tenant, session_id: str) -> CancelView:
    """Stop the running attempt (its input stays unanswered for the next run) and every
    subagent below the session (running or not yet claimed; docs/subagents.md). For an
    external session: cancel its latest turn at the backend; a backend that cannot cancel
    answers 502 `backend_cancel_refused`, one that cannot be reached 503: never a success
    that did not happen."""
    markers = external_markers(await session_row(services, tenant, session_id))
    if markers is not None:
        return await cancel_external(services, tenant, session_id, markers)
    marked, _ = await services.subagents.cancel_tree(tenant, session_id)
    if not marked:
        raise NoRunningAttempt(f"session {session_id!r} has no running attempt nor subagent")
    return CancelView(cancel_requested=True)
