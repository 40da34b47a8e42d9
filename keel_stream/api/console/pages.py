"""The web console, served by the API process: server-rendered pages (Jinja2) over the same
services as /v1; the pages' scripts talk to /v1 with the sign-in cookie."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from keel_stream import __version__
from keel_stream.api.console.overview import Overview, gather
from keel_stream.api.console.signin import (
    console_tenant,
    login_key,
    same_origin,
    sign_in,
    signed_out,
    throttle_of,
    to_login,
)
from keel_stream.api.deps import CONSOLE_HEADER, config_of, services_of, session_row, session_view
from keel_stream.errors import KeelError

__all__ = ["STATIC", "router"]

HERE: Final = Path(__file__).parent
STATIC: Final = StaticFiles(directory=HERE / "static")
TEMPLATES: Final = Jinja2Templates(directory=HERE / "templates")
PAGE_SIZE: Final = 50
_CURSOR: Final = r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$"
_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # no-referrer would make form posts send Origin: null
    "Cache-Control": "no-store",
}

router = APIRouter(prefix="/console", include_in_schema=False)


def _page(request: Request, template: str, code: int = 200, **context: Any) -> HTMLResponse:
    context.update(version=__version__, console_header=CONSOLE_HEADER)
    return TEMPLATES.TemplateResponse(
        request, template, context, status_code=code, headers=_HEADERS
    )


@router.get("")
async def home() -> RedirectResponse:
    return RedirectResponse("/console/sessions", status_code=303)


@router.get("/login")
async def login_form(
    request: Request, signed_out_: Annotated[int, Query(alias="signedOut", ge=0, le=1)] = 0
) -> Response:
    return _page(request, "login.html", notice="Signed out." if signed_out_ else None)


@router.post("/login")
async def login(request: Request) -> Response:
    if not same_origin(request):
        return _page(request, "login.html", 403, error="Sign in from the console's own page.")
    address = request.client.host if request.client else "unknown"
    throttle = throttle_of(request)
    wait_s = throttle.retry_after_s(address, time.time())
    if wait_s is not None:
        page = _page(
            request, "login.html", 429, error=f"Too many failed sign-ins: retry in {wait_s} s."
        )
        page.headers["Retry-After"] = str(wait_s)
        return page
    key = await login_key(request)
    signed = await sign_in(request, key) if key else None
    if signed is None:
        throttle.failed(address)
        return _page(request, "login.html", 401, error="That API key is unknown or revoked.")
    return signed


@router.post("/logout")
async def logout(request: Request) -> Response:
    if not same_origin(request):
        return _page(request, "login.html", 403, error="Sign out from the console's own page.")
    return await signed_out(request)


@router.get("/sessions")
async def sessions_page(
    request: Request,
    status: Literal["", "pending", "running", "done", "failed", "none"] = "",
    owner: Literal["", "keel", "external"] = "",
    cursor: Annotated[str | None, Query(max_length=128, pattern=_CURSOR)] = None,
) -> Response:
    tenant = await console_tenant(request)
    if tenant is None:
        return to_login()
    rows = await services_of(request).sessions.page(
        tenant, cursor, PAGE_SIZE + 1, run_status=status or None, state_owner=owner or None
    )
    shown = [session_view(r) for r in rows[:PAGE_SIZE]]
    more = len(rows) > PAGE_SIZE and bool(shown)
    return _page(
        request,
        "sessions.html",
        tenant=tenant,
        sessions=shown,
        status=status,
        owner=owner,
        cursor=cursor,
        next_cursor=shown[-1].id if more else None,
    )


@router.get("/sessions/{session_id}")
async def session_page(request: Request, session_id: str) -> Response:
    tenant = await console_tenant(request)
    if tenant is None:
        return to_login()
    try:
        record = await session_row(services_of(request), tenant, session_id)
    except KeelError as exc:
        return _page(request, "missing.html", 404, tenant=tenant, message=str(exc))
    return _page(request, "session.html", tenant=tenant, session=session_view(record))


async def _overview(request: Request, tenant: str) -> Overview:
    services, config = services_of(request), config_of(request)
    return await gather(
        services.ops, services.projections, tenant, config.kafka, config.topic_prefix
    )


@router.get("/ops")
async def ops_page(request: Request) -> Response:
    tenant = await console_tenant(request)
    if tenant is None:
        return to_login()
    overview = await _overview(request, tenant)
    return _page(request, "ops.html", tenant=tenant, overview=overview)


@router.get("/ops/panel")
async def ops_panel(request: Request) -> Response:
    """The operations page's figures alone, for the page's refresh."""
    tenant = await console_tenant(request)
    if tenant is None:
        return Response(status_code=401, headers=_HEADERS)
    overview = await _overview(request, tenant)
    return _page(request, "ops_panel.html", overview=overview)
