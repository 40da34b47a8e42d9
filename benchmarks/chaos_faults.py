"""The faults of the chaos run, each a task over the chaos phase.

- kills: every `every_s` (±30%) one service is SIGKILLed; the services take turns in a shuffled
  order, so each kind is killed about as often as the others, and only a process that has run
  for `every_s` at least is killed (one still starting is left to start); its supervisor
  restarts it;
- a broker stop: the broker is stopped (SIGTERM to its process group, as an operator would),
  kept down for `down_s`, started again on the same ports and log directory;
- a PostgreSQL restart: a fast shutdown (SIGINT), then a start on the same data directory.

On the memory-only embedded broker (the fallback) the relay and the projections worker are held
down while the broker is, and the topics re-applied and refilled from the ledger before they
start again, which is what `keel-stream dev` does when it finds a new broker incarnation.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from dataclasses import dataclass, field

from benchmarks.chaos_cluster import SERVICES, Cluster

__all__ = ["FaultLog", "broker_stop", "kill_loop", "postgres_restart"]


@dataclass
class FaultLog:
    """What was done, in seconds since the chaos phase began."""

    started: float
    kills: list[tuple[float, str]] = field(default_factory=list)
    skipped: int = 0
    broker_stop: tuple[float, float] | None = None
    """(when it was stopped, how long until it answered again)"""
    postgres_restart: tuple[float, float] | None = None
    """(when it was stopped, how long until it was up again)"""
    ended: float = float("inf")
    """when the phase ended (the kills stopped)"""

    def now(self) -> float:
        return round(time.monotonic() - self.started, 1)

    def kills_by_service(self) -> dict[str, int]:
        counted = Counter(name for _, name in self.kills)
        return {name: counted[name] for name in SERVICES}


async def _until(stop: asyncio.Event, delay_s: float) -> bool:
    """Sleep delay_s unless stop is set first; True when stop is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), delay_s)
    return stop.is_set()


async def kill_loop(
    cluster: Cluster, every_s: float, stop: asyncio.Event, rng: random.Random, log: FaultLog
) -> None:
    turns: list[str] = []
    while not await _until(stop, every_s * rng.uniform(0.7, 1.3)):
        if not turns:
            turns = list(SERVICES)
            rng.shuffle(turns)
            if log.kills and turns[-1] == log.kills[-1][1]:  # never the same one twice in a row
                turns.insert(0, turns.pop())
        # the next in turn that has run for an interval (a process that is still starting, or
        # one that is down, waits: a kill then always hits a process that had time to start)
        up = [n for n in reversed(turns) if cluster.services[n].running_for() >= every_s]
        if up and cluster.services[up[0]].kill():
            turns.remove(up[0])
            log.kills.append((log.now(), up[0]))
        else:
            log.skipped += 1


async def broker_stop(cluster: Cluster, after_s: float, down_s: float, log: FaultLog) -> None:
    await asyncio.sleep(after_s)
    held = (
        []
        if cluster.servers.durable
        else [cluster.services["relay"], cluster.services["projector"]]
    )
    for service in held:
        await service.hold()
    at = log.now()
    stopped = time.monotonic()
    await asyncio.to_thread(cluster.servers.broker.stop)
    await asyncio.sleep(down_s)
    await asyncio.to_thread(cluster.servers.broker.start)
    if held:
        await cluster.align()
        for service in held:
            service.release()
    log.broker_stop = (at, round(time.monotonic() - stopped, 1))


async def postgres_restart(cluster: Cluster, after_s: float, log: FaultLog) -> None:
    await asyncio.sleep(after_s)
    at = log.now()
    stopped = time.monotonic()
    postgres = cluster.servers.postgres
    await asyncio.to_thread(postgres.stop)
    dsn = await asyncio.to_thread(postgres.start)
    if dsn != cluster.servers.dsn:
        raise RuntimeError(f"PostgreSQL came back on another address: {dsn}")
    log.postgres_restart = (at, round(time.monotonic() - stopped, 1))
