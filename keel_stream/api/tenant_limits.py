"""Per-tenant and per-key bounds of an API process, below its own connection cap, so that no
tenant (and no single key) can take what the others need.

- Concurrent: SSE streams and other requests in flight, per tenant and per key. A request over
  either is `429 tenant_busy` at once (never queued); its slot is given back when its response
  ends (a stream's when the client goes away), by `SlotRelease`, the outermost middleware.
- Rates (a moving one-second or one-minute window, through the `limits` library): requests per
  tenant, sessions opened, inputs sent. Over one: `429 rate_limited` with `Retry-After`.

Defaults are the KEEL_TENANT_* / KEEL_KEY_* settings; the tenant document's `limits` part
overrides them for one tenant (read at most every CONFIG_CACHE_S). The bounds are per API
process: N replicas admit up to N times as much, which the documented table says.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Final, Literal, Protocol

from limits import RateLimitItem, RateLimitItemPerMinute, RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter
from starlette.types import ASGIApp, Receive, Scope, Send

from keel_stream.errors import RateLimited, TenantBusy
from keel_stream.settings import KeelSettings
from keel_stream.store.tenant_configs import StoredConfig
from keel_stream.tenancy.limits import LimitsSpec

__all__ = [
    "CONFIG_CACHE_S",
    "Rate",
    "SlotRelease",
    "TenantGuard",
    "TenantLimits",
    "release_after_response",
]

CONFIG_CACHE_S: Final = 5.0
"""How long a tenant's document overrides are used before they are read again."""
_RELEASE: Final = "keel.release"
Rate = Literal["sessions", "inputs"]


class ConfigReader(Protocol):
    async def latest(self, tenant: str) -> StoredConfig | None: ...


@dataclass(frozen=True, slots=True)
class TenantLimits:
    max_streams: int = 500
    max_streams_per_key: int = 250
    max_in_flight: int = 200
    max_in_flight_per_key: int = 100
    requests_per_second: int = 500
    sessions_per_minute: int = 1200
    inputs_per_second: int = 100
    backend_events_per_second: int = 1000
    backend_flood_grace_s: float = 30.0
    """Not in the document: the operator's, for every tenant."""

    @classmethod
    def from_settings(cls, settings: KeelSettings) -> TenantLimits:
        return cls(
            max_streams=settings.tenant_max_streams,
            max_streams_per_key=settings.key_max_streams,
            max_in_flight=settings.tenant_max_in_flight,
            max_in_flight_per_key=settings.key_max_in_flight,
            requests_per_second=settings.tenant_requests_per_s,
            sessions_per_minute=settings.tenant_sessions_per_min,
            inputs_per_second=settings.tenant_inputs_per_s,
            backend_events_per_second=settings.tenant_backend_events_per_s,
            backend_flood_grace_s=settings.backend_flood_grace_s,
        )

    def overridden(self, spec: LimitsSpec) -> TenantLimits:
        given = {name: value for name, value in spec if value is not None}
        return replace(self, **given)


@dataclass
class _Cached:
    limits: TenantLimits
    read_at: float


@dataclass
class TenantGuard:
    defaults: TenantLimits
    configs: ConfigReader | None = None
    _held: Counter[str] = field(default_factory=Counter)
    _cache: dict[str, _Cached] = field(default_factory=dict)
    _limiter: MovingWindowRateLimiter = field(
        default_factory=lambda: MovingWindowRateLimiter(MemoryStorage())
    )

    async def limits_for(self, tenant: str) -> TenantLimits:
        cached = self._cache.get(tenant)
        now = time.monotonic()
        if cached is not None and now - cached.read_at < CONFIG_CACHE_S:
            return cached.limits
        limits = self.defaults
        stored = await self.configs.latest(tenant) if self.configs is not None else None
        if stored is not None:
            limits = limits.overridden(stored.config.limits)
        self._cache[tenant] = _Cached(limits, now)
        return limits

    async def admit(self, tenant: str, key_id: str, *, stream: bool) -> Callable[[], None]:
        """Take the request's slots (TenantBusy when a bound is reached, RateLimited past the
        tenant's request rate); the function returned gives them back, once."""
        limits = await self.limits_for(tenant)
        self._hit(RateLimitItemPerSecond(limits.requests_per_second), f"requests:{tenant}")
        kind = "stream" if stream else "request"
        per_tenant, per_key = (
            (limits.max_streams, limits.max_streams_per_key)
            if stream
            else (limits.max_in_flight, limits.max_in_flight_per_key)
        )
        bounds = ((f"{kind}:t:{tenant}", per_tenant), (f"{kind}:k:{key_id}", per_key))
        for slot, bound in bounds:
            if self._held[slot] >= bound:
                who = "tenant" if ":t:" in slot else "API key"
                raise TenantBusy(f"this {who} holds {bound} {kind}s at once, its bound")
        for slot, _ in bounds:
            self._held[slot] += 1
        return self._releaser([slot for slot, _ in bounds])

    async def count(self, tenant: str, rate: Rate) -> None:
        """One more session or input of the tenant; RateLimited past its rate."""
        limits = await self.limits_for(tenant)
        item: RateLimitItem = (
            RateLimitItemPerMinute(limits.sessions_per_minute)
            if rate == "sessions"
            else RateLimitItemPerSecond(limits.inputs_per_second)
        )
        self._hit(item, f"{rate}:{tenant}")

    def held(self, tenant: str, *, stream: bool) -> int:
        return self._held[f"{'stream' if stream else 'request'}:t:{tenant}"]

    def _hit(self, item: RateLimitItem, key: str) -> None:
        if self._limiter.hit(item, key):
            return
        reset = self._limiter.get_window_stats(item, key).reset_time
        wait_s = max(1, math.ceil(reset - time.time()))
        raise RateLimited(f"over {item} for this tenant; retry in {wait_s} s", wait_s)

    def _releaser(self, slots: list[str]) -> Callable[[], None]:
        released = False

        def release() -> None:
            nonlocal released
            if released:
                return
            released = True
            for slot in slots:
                self._held[slot] -= 1
                if self._held[slot] <= 0:
                    del self._held[slot]

        return release


def release_after_response(scope: Scope, release: Callable[[], None]) -> None:
    """Give `release` back when the request's response has ended (SlotRelease runs it)."""
    scope.setdefault(_RELEASE, []).append(release)


class SlotRelease:
    """The outermost middleware: runs the releases a request registered once its whole
    response (a stream's last byte, or the client's going away) is done, whatever happened."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            for release in scope.pop(_RELEASE, ()):
                release()
