"""Which background services run now, as the API reports them: `hooks` and `triggers` in
GET /v1/capabilities and `dependencies.hooksSender` / `.triggerScheduler` in /readyz.

A hooks sender or trigger scheduler counts while its heartbeat row is fresh by the database's
clock (keel_stream.store.service_heartbeats): at most 3 of its beat intervals old. The answer
is cached for CACHE_S, one question in flight at a time, so polling either route stays cheap.
A database that does not answer counts as none running (the error says why).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from keel_stream.errors import StoreError
from keel_stream.store.service_heartbeats import ServiceHeartbeats, ServiceKind

__all__ = ["CACHE_S", "Presence", "Running"]

CACHE_S: Final = 1.5
"""How long an answer of the database (here) or the broker (readiness) is reused."""


@dataclass(frozen=True, slots=True)
class Running:
    """How many instances of each background service run now."""

    instances: Mapping[ServiceKind, int] = field(default_factory=dict)
    error: str | None = None
    """Why nothing is known to run: the heartbeats could not be read."""

    def count(self, kind: ServiceKind) -> int:
        return self.instances.get(kind, 0)


class Presence:
    """The heartbeats, read at most once per cache_s."""

    def __init__(self, heartbeats: ServiceHeartbeats, cache_s: float = CACHE_S) -> None:
        self._heartbeats = heartbeats
        self._cache_s = cache_s
        self._lock = asyncio.Lock()
        self._last: Running | None = None
        self._asked_at = 0.0

    async def running(self) -> Running:
        async with self._lock:
            if self._last is None or time.monotonic() - self._asked_at >= self._cache_s:
                self._last = await self._ask()
                self._asked_at = time.monotonic()
            return self._last

    async def _ask(self) -> Running:
        try:
            return Running(dict(await self._heartbeats.running()))
        except StoreError as exc:
            return Running(error=exc.message)
