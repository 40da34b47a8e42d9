"""The console's sign-in: an API key posted once and exchanged for a sign-in token.

The cookie holds a random token (stored hashed, bound to the key, expiring after a working day,
revoked at sign-out, ended by revoking the key), never the key itself: a cookie that leaks
(another port of the same host receives it; cookies are not isolated by port) can be signed
out, and a key planted as a cookie signs nobody in. Over HTTPS the cookie is `__Host-` prefixed
(Secure, this host, path /). Failed sign-ins are throttled per client address and overall.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import parse_qs, urlsplit

from fastapi import Request
from fastapi.responses import RedirectResponse, Response
from limits import RateLimitItem, RateLimitItemPerMinute
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from keel_stream.api.deps import console_cookie_name, console_token, services_of

__all__ = [
    "COOKIE_MAX_AGE_S",
    "LOGIN_PATH",
    "SignInThrottle",
    "console_tenant",
    "login_key",
    "same_origin",
    "sign_in",
    "signed_out",
    "throttle_of",
    "to_login",
]

LOGIN_PATH: Final = "/console/login"
COOKIE_MAX_AGE_S: Final = 12 * 3600
"""A sign-in lasts a working day; a revoked key or a sign-out ends it at the next request."""
MAX_KEY_CHARS: Final = 512
FAILURES_PER_ADDRESS: Final = 10
FAILURES_OVERALL: Final = 100
"""Failed sign-ins a minute, per client address and for the whole process."""


@dataclass
class SignInThrottle:
    """Failed sign-ins in a moving one-minute window: past either bound, sign-in answers 429
    until the window has room again (successful sign-ins are not counted)."""

    per_address: RateLimitItem = field(
        default_factory=lambda: RateLimitItemPerMinute(FAILURES_PER_ADDRESS)
    )
    overall: RateLimitItem = field(default_factory=lambda: RateLimitItemPerMinute(FAILURES_OVERALL))
    _limiter: MovingWindowRateLimiter = field(
        default_factory=lambda: MovingWindowRateLimiter(MemoryStorage())
    )

    def _windows(self, address: str) -> tuple[tuple[RateLimitItem, str], ...]:
        return ((self.per_address, f"address:{address}"), (self.overall, "overall"))

    def retry_after_s(self, address: str, now_s: float) -> int | None:
        """Seconds until a sign-in from this address may be tried again; None: now."""
        waits = [
            self._limiter.get_window_stats(item, key).reset_time - now_s
            for item, key in self._windows(address)
            if not self._limiter.test(item, key)
        ]
        return max(1, math.ceil(max(waits))) if waits else None

    def failed(self, address: str) -> None:
        for item, key in self._windows(address):
            self._limiter.hit(item, key)


def throttle_of(request: Request) -> SignInThrottle:
    throttle = getattr(request.app.state, "sign_in_throttle", None)
    if not isinstance(throttle, SignInThrottle):
        throttle = request.app.state.sign_in_throttle = SignInThrottle()
    return throttle


async def console_tenant(request: Request) -> str | None:
    """The tenant of the console's sign-in; None when there is none or it has ended."""
    token = console_token(request)
    if not token or len(token) > MAX_KEY_CHARS:
        return None
    principal = await services_of(request).keys.console_principal(token)
    return None if principal is None else principal[0]


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


async def sign_in(request: Request, key: str) -> Response | None:
    """A redirect that sets the sign-in cookie, or None when the key is unknown or revoked."""
    token = await services_of(request).keys.open_console_session(key, COOKIE_MAX_AGE_S)
    if token is None:
        return None
    response = RedirectResponse("/console/sessions", status_code=303)
    response.set_cookie(
        console_cookie_name(request),
        token,
        max_age=COOKIE_MAX_AGE_S,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )
    return response


async def signed_out(request: Request) -> Response:
    """End the sign-in where it is kept (the token no longer works, wherever it was copied),
    then drop the cookie."""
    token = console_token(request)
    if token:
        await services_of(request).keys.close_console_session(token)
    response = to_login("signed out")
    response.delete_cookie(
        console_cookie_name(request),
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response
