"""How fast a backend's events are let in: at most the tenant's rate a second (a moving
one-second window per tenant, through the `limits` library), by waiting, never by dropping.

The wait happens in the reader of the backend's connection, before the event is taken: while
it waits nothing more is read from that backend, so its pipe (or its HTTP stream) fills and the
backend blocks on its own write: backpressure. Each connection waits in its own reader task;
another tenant's window, and its reader, are never touched.

A connection held to the rate for longer than the grace without a pause (it had to wait in
every window, never a whole window without waiting) is flooding: its owner fails it loudly
(docs/external.md#event-floods).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Final

from limits import RateLimitItemPerSecond
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

__all__ = ["EventFlow", "EventLimits", "EventRate"]

_MIN_WAIT_S: Final = 0.001
_MAX_WAIT_S: Final = 1.0
_WINDOW_S: Final = 1.0
"""The window's length: a flood fills it (and waits) in every one of them, however bursty."""


@dataclass(frozen=True, slots=True)
class EventLimits:
    """The defaults (KEEL_TENANT_BACKEND_EVENTS_PER_S, KEEL_BACKEND_FLOOD_GRACE_S); a tenant's
    document overrides the rate (`limits.backendEventsPerSecond`)."""

    per_second: int = 1000
    flood_grace_s: float = 30.0


@dataclass
class EventRate:
    """One moving window a second per key (a tenant), shared by all of its backends."""

    _limiter: MovingWindowRateLimiter = field(
        default_factory=lambda: MovingWindowRateLimiter(MemoryStorage())
    )

    async def take(self, key: str, per_second: int) -> float:
        """Take one event of ``key``'s window, waiting until it has room; the seconds waited
        (0.0 when there was room at once)."""
        item = RateLimitItemPerSecond(per_second)
        if self._limiter.hit(item, key):
            return 0.0
        started = time.monotonic()
        while True:
            reset = self._limiter.get_window_stats(item, key).reset_time
            await asyncio.sleep(min(max(reset - time.time(), _MIN_WAIT_S), _MAX_WAIT_S))
            if self._limiter.hit(item, key):
                return time.monotonic() - started


@dataclass
class EventFlow:
    """One backend connection's events let in through ``rate``: whether its reader is held,
    and since when it has been held without a pause."""

    rate: EventRate
    grace_s: float
    _held_since: float | None = None
    _waiting: int = 0
    _last_held: float = float("-inf")

    async def admit(self, key: str, per_second: int) -> float | None:
        """Wait for the event's turn; the seconds the connection has been held without a pause
        when that is past the grace (it is flooding), else None."""
        self._waiting += 1
        try:
            waited = await self.rate.take(key, per_second)
        finally:
            self._waiting -= 1
        now = time.monotonic()
        if waited:
            if self._held_since is None or now - waited - self._last_held > _WINDOW_S:
                self._held_since = now - waited
            self._last_held = now
        elif now - self._last_held > _WINDOW_S:
            self._held_since = None  # a whole window without a wait: it paused
        if self._held_since is None or now - self._held_since <= self.grace_s:
            return None
        return now - self._held_since

    def held_after(self, moment: float) -> bool:
        """Whether the reader was held at some time after ``moment`` (time.monotonic): an
        answer sent then waited behind events not yet read."""
        return self._waiting > 0 or self._last_held >= moment

    def reset(self) -> None:
        """A new connection starts unheld."""
        self._held_since = None
