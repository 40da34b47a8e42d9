"""The trigger scheduler (`keel-stream triggers run`): claim due triggers under a lease, plan
each due nominal time, carry its firing out, release.

Any number of replicas may run: a claim takes rows with `FOR UPDATE SKIP LOCKED` and leases
them, each planning transaction re-checks the lease under the row lock, and a firing's key is
unique per trigger, so a nominal time is planned once; its commit is keyed by it, so it is
committed once even when a replica dies between the two and another finishes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Final

from keel_stream.errors import KeelError
from keel_stream.heartbeats import beating
from keel_stream.logs import get_logger
from keel_stream.settings import KeelSettings
from keel_stream.store import Ledger, open_store
from keel_stream.store.service_heartbeats import ServiceKind
from keel_stream.store.triggers_schedule import TriggerScheduleStore
from keel_stream.triggers import metrics
from keel_stream.triggers.firing import carry_out, plan_next

__all__ = ["Scheduler", "SchedulerConfig", "run_scheduler"]

_log = get_logger("keel_stream.triggers")
_RETRY_S: Final = 1.0


@dataclass(frozen=True)
class SchedulerConfig:
    database_url: str
    poll_s: float = 0.5
    lease_s: float = 15.0
    batch: int = 32
    """Triggers claimed at once."""
    plans_per_claim: int = 100
    """Nominal times one claim plans at most (a catch-up records one row for all it missed)."""
    owner: str = ""
    """This replica's name in the firings it plans (`host:pid` unless given)."""
    heartbeat_s: float = 5.0
    """How often the replica beats its row (the API's `triggers` capability;
    keel_stream.heartbeats)."""

    @classmethod
    def from_settings(cls, settings: KeelSettings, database_url: str) -> SchedulerConfig:
        return cls(
            database_url=database_url,
            poll_s=settings.triggers_poll_interval_s,
            lease_s=settings.triggers_lease_ttl_s,
            heartbeat_s=settings.service_heartbeat_interval_s,
        )


class Scheduler:
    def __init__(
        self, store: TriggerScheduleStore, ledger: Ledger, config: SchedulerConfig
    ) -> None:
        self._store = store
        self._ledger = ledger
        self._config = config
        self.owner = config.owner or f"{socket.gethostname()}:{os.getpid()}"

    async def tick(self) -> int:
        """Work every trigger claimable now; how many were claimed."""
        token = f"{self.owner}:{secrets.token_hex(6)}"
        claimed = await self._store.claim(token, self._config.lease_s, self._config.batch)
        metrics.CLAIMS.inc(len(claimed))
        results = await asyncio.gather(
            *(self._work(trigger_id, token) for trigger_id in claimed), return_exceptions=True
        )
        for failure in results:
            if isinstance(failure, BaseException):
                if not isinstance(failure, KeelError):
                    raise failure
                _log.warning("trigger work failed, retried on the next claim", error=str(failure))
        return len(claimed)

    async def _work(self, trigger_id: str, token: str) -> None:
        try:
            for leftover in await self._store.open_firings(trigger_id):
                await carry_out(self._ledger, self._store, leftover, first=False)
            for _ in range(self._config.plans_per_claim):
                async with self._store.plan(trigger_id, token) as tx:
                    planned = await plan_next(tx, self.owner)
                if not planned.progressed:
                    break
                firing = planned.firing
                if firing is not None and firing.outcome is None and firing.decision != "buffer":
                    await carry_out(self._ledger, self._store, firing, first=True)
        finally:
            with contextlib.suppress(KeelError):
                await self._store.release(trigger_id, token)


async def run_scheduler(config: SchedulerConfig, stop: asyncio.Event) -> None:
    """Tick until stop is set, beating the replica's row meanwhile."""
    store = await open_store(config.database_url, max_size=8)
    try:
        scheduler = Scheduler(store.trigger_schedule(), store.ledger(), config)
        _log.info("trigger scheduler started", owner=scheduler.owner)
        heartbeats = store.service_heartbeats()
        async with beating(heartbeats, ServiceKind.TRIGGER_SCHEDULER, config.heartbeat_s):
            await _tick_until(scheduler, config, stop)
    finally:
        await store.close()


async def _tick_until(scheduler: Scheduler, config: SchedulerConfig, stop: asyncio.Event) -> None:
    """Tick until stop is set; a tick that claimed nothing waits poll_s (or the stop)."""
    while not stop.is_set():
        try:
            busy = await scheduler.tick()
        except KeelError as exc:
            if not exc.retriable:
                raise
            _log.warning("trigger scheduler tick failed, retrying", error=str(exc))
            busy, wait = 0, _RETRY_S
        else:
            wait = config.poll_s
        if busy < config.batch:  # a full batch: more may be due at once
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), wait)
