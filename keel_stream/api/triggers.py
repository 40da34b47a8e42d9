"""/v1/triggers: schedules and inbound webhooks that commit input into sessions
(docs/triggers.md). Another tenant's trigger is a 404, as a missing one is. The ingest route
takes no API key: the trigger's own secret authenticates it."""

from __future__ import annotations

import secrets
import time
from typing import Annotated, Final

from fastapi import APIRouter, Path, Query, Request, Response

from keel_stream.api.deps import ERRORS, Services, Svc, Tenant, session_row
from keel_stream.api.errors import ErrorBody
from keel_stream.clock import utc_now
from keel_stream.errors import InvalidTrigger, NotWebhookTrigger, PayloadTooLarge, TriggerNotFound
from keel_stream.hooks.envelope import new_secret
from keel_stream.store.triggers import FiringRow, NewTrigger, TriggerRow
from keel_stream.triggers.firing import carry_out, first_nominal, plan_delivery
from keel_stream.triggers.models import (
    MAX_INGEST_BYTES,
    CreateTrigger,
    FiringPage,
    FiringView,
    IngestAnswer,
    TriggerCreated,
    TriggerList,
    TriggerView,
    check_template,
    schedule_of,
)
from keel_stream.triggers.signatures import verify

__all__ = ["router"]

router = APIRouter(tags=["triggers"])

_PAGE_MAX: Final = 200
_CURSOR: Final = r"^[0-9]{1,18}$"
TriggerId = Annotated[str, Path(pattern=r"^tr_[0-9a-f]{16}$", description="A trigger's id.")]


def _view(row: TriggerRow) -> TriggerView:
    spec = CreateTrigger.model_validate(row.spec)
    return TriggerView(
        id=row.id,
        **spec.model_dump(),
        state=row.state,
        fires=row.fires,
        next_fire_at=row.next_fire_at,
        next_nominal_at=row.next_nominal_at,
        created_at=row.created_at,
        ingest_path=f"/v1/triggers/{row.id}/ingest" if row.kind == "webhook" else None,
    )


def _firing_view(row: FiringRow) -> FiringView:
    return FiringView(
        id=row.id,
        key=row.key,
        nominal_time=row.nominal_at,
        actual_time=row.actual_at,
        decision=row.decision,
        reason=row.reason,
        delivery=row.delivery,
        session=row.session,
        outcome=row.outcome,
        seq=row.seq,
        created=row.created,
        error=row.error,
        detail=dict(row.detail),
        recorded_at=row.recorded_at,
        finished_at=row.finished_at,
    )


async def _check(services: Services, tenant: str, body: CreateTrigger) -> None:
    check_template(body)
    if body.target.session is not None:
        await session_row(services, tenant, body.target.session)
    if body.schedule is not None:
        schedule = schedule_of(body.schedule)
        least = services.triggers.min_interval_s
        if schedule.every_s is not None and schedule.every_s < least:
            raise InvalidTrigger(f"every: at least {least} s here (KEEL_TRIGGERS_MIN_INTERVAL_S)")


@router.post("/v1/triggers", status_code=201, response_model=TriggerCreated, responses=ERRORS)
async def create_trigger(services: Svc, tenant: Tenant, body: CreateTrigger) -> TriggerCreated:
    """A schedule or an inbound webhook; a webhook's answer holds its secret, once."""
    await _check(services, tenant, body)
    trigger_id = f"tr_{secrets.token_hex(8)}"
    nominal = fire = None
    if body.schedule is not None:
        first = first_nominal(body, trigger_id, utc_now())
        if first is None:
            raise InvalidTrigger("the schedule has no nominal time after now (see endAt)")
        nominal, fire = first
    secret = new_secret() if body.kind == "webhook" else None
    row = await services.triggers.store.create(
        NewTrigger(
            id=trigger_id,
            tenant=tenant,
            kind=body.kind,
            spec=body.model_dump(mode="json", exclude_none=True),
            secret=secret,
            next_nominal_at=nominal,
            next_fire_at=fire,
        )
    )
    return TriggerCreated(**_view(row).model_dump(), secret=secret)


@router.get("/v1/triggers", response_model=TriggerList, responses=ERRORS)
async def list_triggers(
    services: Svc,
    tenant: Tenant,
    cursor: Annotated[str | None, Query(pattern=r"^tr_[0-9a-f]{16}$")] = None,
    limit: Annotated[int, Query(ge=1, le=_PAGE_MAX)] = 50,
) -> TriggerList:
    """The tenant's triggers by id; pass nextCursor as cursor to go on."""
    rows = await services.triggers.store.list_triggers(tenant, cursor or "", limit + 1)
    more = len(rows) > limit
    rows = rows[:limit]
    return TriggerList(
        triggers=[_view(r) for r in rows], next_cursor=rows[-1].id if more and rows else None
    )


@router.get("/v1/triggers/{trigger_id}", response_model=TriggerView, responses=ERRORS)
async def get_trigger(services: Svc, tenant: Tenant, trigger_id: TriggerId) -> TriggerView:
    return _view(await services.triggers.store.get(tenant, trigger_id))


@router.delete("/v1/triggers/{trigger_id}", status_code=204, responses=ERRORS)
async def delete_trigger(services: Svc, tenant: Tenant, trigger_id: TriggerId) -> Response:
    """Delete the trigger with its firings log; it fires no more."""
    await services.triggers.store.delete(tenant, trigger_id)
    return Response(status_code=204)


@router.post("/v1/triggers/{trigger_id}/pause", response_model=TriggerView, responses=ERRORS)
async def pause_trigger(services: Svc, tenant: Tenant, trigger_id: TriggerId) -> TriggerView:
    """Stop firing (a webhook delivery answers 409 trigger_paused); a completed one stays so."""
    store = services.triggers.store
    row = await store.set_state(tenant, trigger_id, "paused", None, None)
    return _view(row or await store.get(tenant, trigger_id))


@router.post("/v1/triggers/{trigger_id}/resume", response_model=TriggerView, responses=ERRORS)
async def resume_trigger(services: Svc, tenant: Tenant, trigger_id: TriggerId) -> TriggerView:
    """Fire again from the next nominal time after now (those while paused are not fired)."""
    store = services.triggers.store
    current = await store.get(tenant, trigger_id)
    nominal = fire = None
    if current.kind == "schedule":
        first = first_nominal(CreateTrigger.model_validate(current.spec), trigger_id, utc_now())
        if first is not None:
            nominal, fire = first
    state = "active" if current.kind == "webhook" or nominal is not None else "completed"
    row = await store.set_state(tenant, trigger_id, state, nominal, fire)
    return _view(row or await store.get(tenant, trigger_id))


@router.get("/v1/triggers/{trigger_id}/firings", response_model=FiringPage, responses=ERRORS)
async def list_firings(
    services: Svc,
    tenant: Tenant,
    trigger_id: TriggerId,
    cursor: Annotated[str | None, Query(pattern=_CURSOR)] = None,
    limit: Annotated[int, Query(ge=1, le=_PAGE_MAX)] = 50,
) -> FiringPage:
    """The trigger's firings, newest first: decision, outcome, the seq committed."""
    store = services.triggers.store
    await store.get(tenant, trigger_id)
    page = await store.firings(trigger_id, int(cursor or 0), limit + 1)
    more = len(page) > limit
    page = page[:limit]
    return FiringPage(
        firings=[_firing_view(f) for f in page],
        next_cursor=str(page[-1].id) if more and page else None,
    )


async def _body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "0")
    if declared.isdigit() and int(declared) > MAX_INGEST_BYTES:
        raise PayloadTooLarge(f"an inbound webhook body is at most {MAX_INGEST_BYTES} bytes")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_INGEST_BYTES:
            raise PayloadTooLarge(f"an inbound webhook body is at most {MAX_INGEST_BYTES} bytes")
    return body


@router.post(
    "/v1/triggers/{trigger_id}/ingest",
    status_code=202,
    response_model=IngestAnswer,
    responses={**ERRORS, 413: {"model": ErrorBody}},
)
async def ingest(services: Svc, trigger_id: TriggerId, request: Request) -> IngestAnswer:
    """An inbound webhook, signed with the trigger's secret (Standard Webhooks or GitHub's
    X-Hub-Signature-256) and de-duplicated on its delivery id: 202 with the seq of the
    user.message it committed (`created: false` for a delivery seen before)."""
    body = await _body(request)
    triggers = services.triggers
    trigger = await triggers.store.get_any(trigger_id)
    if trigger.kind != "webhook" or trigger.secret is None:
        raise NotWebhookTrigger(f"trigger {trigger_id!r} is a schedule")
    scheme = CreateTrigger.model_validate(trigger.spec).webhook
    headers = {name.lower(): value for name, value in request.headers.items()}
    verified = verify(
        scheme.scheme if scheme else "standard", trigger.secret, headers, body, time.time()
    )
    text = body.decode("utf-8", errors="replace")
    async with triggers.schedule.plan(trigger_id, None) as tx:
        firing, new = await plan_delivery(tx, verified, text, "api")
    if firing.outcome is None and firing.decision != "buffer":
        done = await carry_out(services.ledger, triggers.schedule, firing, first=new)
        firing = done or await triggers.store.firing(trigger_id, verified.key) or firing
    if firing is None:  # pragma: no cover - a firing is never deleted but with its trigger
        raise TriggerNotFound(f"trigger {trigger_id!r} not found")
    return IngestAnswer(
        seq=firing.seq,
        created=new and firing.created is True,
        decision=firing.decision,
        session=firing.session,
    )
