"""/v1/hooks: a tenant's webhook subscriptions, their deliveries log, redelivery and replay
(docs/hooks.md). Another tenant's subscription is a 404, as a missing one is."""

from __future__ import annotations

from typing import Annotated, Final, Literal

from fastapi import APIRouter, Path, Query, Response

from keel_stream.api.deps import ERRORS, Svc, Tenant
from keel_stream.errors import HookDisabled, InvalidHook
from keel_stream.hooks import HOOK_NAMES
from keel_stream.hooks.envelope import new_secret
from keel_stream.hooks.models import (
    CreateHook,
    DeliveryDetail,
    DeliveryPage,
    HookCreated,
    HookList,
    HookView,
    ReplayBody,
    ReplayView,
    delivery_detail,
    delivery_view,
    hook_view,
)
from keel_stream.hooks.replay import ReplayRequest, replay
from keel_stream.kernel import check_identifier

__all__ = ["router"]

router = APIRouter(tags=["hooks"])

_PAGE_MAX: Final = 200
_CURSOR: Final = r"^[0-9]{1,18}$"
HookId = Annotated[str, Path(pattern=r"^hk_[0-9a-f]{16}$", description="A hook's id.")]
DeliveryId = Annotated[int, Path(ge=1, le=2**63 - 1)]


def _check_events(events: list[str]) -> list[str]:
    unknown = sorted(set(events) - set(HOOK_NAMES))
    if unknown:
        raise InvalidHook(f"unknown hook events {unknown}; this build emits {list(HOOK_NAMES)}")
    return sorted(set(events), key=HOOK_NAMES.index)


@router.post("/v1/hooks", status_code=201, response_model=HookCreated, responses=ERRORS)
async def create_hook(services: Svc, tenant: Tenant, body: CreateHook) -> HookCreated:
    """Subscribe an endpoint to hook events; the answer holds its signing secret, once."""
    events = _check_events(body.events)
    ids = prefix = None
    if body.session_filter is not None:
        ids, prefix = body.session_filter.ids, body.session_filter.prefix
        for session in ids or ():
            check_identifier(session, "session")
        if ids is None and prefix is None:
            raise InvalidHook("sessionFilter needs ids or prefix")
    hooks = services.hooks
    policy = await hooks.policy_for(tenant)
    await policy.target(body.url, hooks.resolver)  # hook_url_refused before storing
    secret = new_secret()
    created = await hooks.store.create(tenant, body.url, events, ids, prefix, secret)
    return HookCreated(**hook_view(created).model_dump(), secret=secret)


@router.get("/v1/hooks", response_model=HookList, responses=ERRORS)
async def list_hooks(services: Svc, tenant: Tenant) -> HookList:
    """The tenant's subscriptions (never their secrets)."""
    return HookList(hooks=[hook_view(h) for h in await services.hooks.store.list_hooks(tenant)])


@router.get("/v1/hooks/{hook_id}", response_model=HookView, responses=ERRORS)
async def get_hook(services: Svc, tenant: Tenant, hook_id: HookId) -> HookView:
    return hook_view(await services.hooks.store.get(tenant, hook_id))


@router.delete("/v1/hooks/{hook_id}", status_code=204, responses=ERRORS)
async def delete_hook(services: Svc, tenant: Tenant, hook_id: HookId) -> Response:
    """Delete the subscription with its deliveries; nothing more is sent to it."""
    await services.hooks.store.delete(tenant, hook_id)
    return Response(status_code=204)


@router.post("/v1/hooks/{hook_id}/rotate", response_model=HookCreated, responses=ERRORS)
async def rotate_secret(services: Svc, tenant: Tenant, hook_id: HookId) -> HookCreated:
    """A new signing secret, shown once; the old one also signs for 24 hours."""
    secret = new_secret()
    rotated = await services.hooks.store.rotate(tenant, hook_id, secret)
    return HookCreated(**hook_view(rotated).model_dump(), secret=secret)


@router.get("/v1/hooks/{hook_id}/deliveries", response_model=DeliveryPage, responses=ERRORS)
async def list_deliveries(
    services: Svc,
    tenant: Tenant,
    hook_id: HookId,
    status: Literal["pending", "delivered", "dead"] | None = None,
    cursor: Annotated[str | None, Query(pattern=_CURSOR)] = None,
    limit: Annotated[int, Query(ge=1, le=_PAGE_MAX)] = 50,
) -> DeliveryPage:
    """The subscription's deliveries, newest first; pass nextCursor as cursor to go on."""
    store = services.hooks.store
    await store.get(tenant, hook_id)
    page = await store.deliveries(hook_id, status, int(cursor or 0), limit + 1)
    more = len(page) > limit
    page = page[:limit]
    return DeliveryPage(
        deliveries=[delivery_view(d) for d in page],
        next_cursor=str(page[-1].id) if more and page else None,
    )


@router.get(
    "/v1/hooks/{hook_id}/deliveries/{delivery_id}",
    response_model=DeliveryDetail,
    responses=ERRORS,
)
async def get_delivery(
    services: Svc, tenant: Tenant, hook_id: HookId, delivery_id: DeliveryId
) -> DeliveryDetail:
    """One delivery with its last attempts."""
    store = services.hooks.store
    await store.get(tenant, hook_id)
    delivery, attempts = await store.delivery(hook_id, delivery_id)
    return delivery_detail(delivery, attempts)


@router.post(
    "/v1/hooks/{hook_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    response_model=DeliveryDetail,
    responses=ERRORS,
)
async def redeliver(
    services: Svc, tenant: Tenant, hook_id: HookId, delivery_id: DeliveryId
) -> DeliveryDetail:
    """Send the delivery again now (the same webhook-id), with a fresh attempt budget."""
    store = services.hooks.store
    subscription = await store.get(tenant, hook_id)
    if subscription.state != "active":
        raise HookDisabled(f"hook {hook_id!r} is disabled: {subscription.disabled_reason}")
    await store.redeliver(hook_id, delivery_id)
    delivery, attempts = await store.delivery(hook_id, delivery_id)
    return delivery_detail(delivery, attempts)


@router.post(
    "/v1/hooks/{hook_id}/replay", status_code=202, response_model=ReplayView, responses=ERRORS
)
async def replay_hooks(
    services: Svc, tenant: Tenant, hook_id: HookId, body: ReplayBody | None = None
) -> ReplayView:
    """Re-derive the hook events from the ledger, from a seq or a time on, and queue them again
    with the same webhook ids."""
    body = body or ReplayBody()
    store = services.hooks.store
    subscription = await store.get(tenant, hook_id)
    request = ReplayRequest(
        from_seq=body.from_seq or 1, from_time=body.from_time, session=body.session
    )
    report = await replay(store, subscription, request)
    return ReplayView(queued=report.queued, sessions=report.sessions, events=report.events)
