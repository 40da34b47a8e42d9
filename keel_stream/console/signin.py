"""The console's sign-in: an API key posted once, kept in an HttpOnly cookie, never in a URL."""

from __future__ import annotations

from typing import Final
from urllib.parse import parse_qs, urlsplit

from fastapi import Request
from fastapi.responses import RedirectResponse, Response

from keel_stream.api.deps import CONSOLE_COOKIE, services_of

__all__ = [
    "COOKIE_MAX_AGE_S",
    "LOGIN_PATH",
    "console_tenant",
    "login_key",
    "same_origin",
    "signed_in",
    "signed_out",
    "to_login",
]

LOGIN_PATH: Final = "/console/login"
COOKIE_MAX_AGE_S: Final = 12 * 3600
"""A sign-in lasts a working day; a revoked key ends it at the next request anyway."""
MAX_KEY_CHARS: Final = 512


async def console_tenant(request: Request) -> str | None:
    """The tenant signed in by the console's cookie; None when there is none or the key is no
    longer valid (revoked)."""
    key = request.cookies.get(CONSOLE_COOKIE, "").strip()
    if not key or len(key) > MAX_KEY_CHARS:
        return None
    return await services_of(request).keys.tenant_for(key)


def to_login(message: str | None = None) -> RedirectResponse:
    target = LOGIN_PATH if message is None else f"{LOGIN_PATH}?signedOut=1"
    return RedirectResponse(target, status_code=303)


def same_origin(request: Request) -> bool:
    """A form post from this origin (or from a client that sends no Origin, like curl)."""
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


async def login_key(request: Request) -> str:
    """The API key of the sign-in form (application/x-www-form-urlencoded, field `key`)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    values = parse_qs(body, max_num_fields=4).get("key", [""])
    return values[0].strip()[:MAX_KEY_CHARS]


def signed_in(request: Request, key: str) -> Response:
    response = RedirectResponse("/console/sessions", status_code=303)
    response.set_cookie(
        CONSOLE_COOKIE,
        key,
        max_age=COOKIE_MAX_AGE_S,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


def signed_out() -> Response:
    response = to_login("signed out")
    response.delete_cookie(CONSOLE_COOKIE, path="/", httponly=True, samesite="strict")
    return response
