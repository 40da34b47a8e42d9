"""The faults of the cluster chaos run, each one engine or service killed, and how long the
platform took to carry on after it.

A fault's recovery is read from the outside, as an operator's dashboard would: from the kill,
how long until the events topic grows again (the relays publish), and how long until each
consumer has caught up with what the topic held then (the projections by the offsets stored
with the read models, the hook senders by their group's committed offsets). The PostgreSQL
fault also records how long the formation took to promote the standby; the write gap (seconds
without any acknowledged commit) is read from the clients' acknowledgements afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import orjson

from benchmarks.cluster_shape import ProductionShape
from keel_stream.hooks.service import group_name
from keel_stream.kafka.admin import describe_topics
from keel_stream.projector.status import projection_status
from keel_stream.store import opened_store
from keel_stream.topics.catalog import EVENTS

__all__ = ["FAULTS", "Fault", "inflict"]

FAULTS: Final = ("broker", "postgres", "api", "worker", "projector", "relay")
"""In turn, as the issue orders them: a Kafka broker, the PostgreSQL primary, then one replica
of each service (the supervisor restarts it, as an orchestrator would); the relay killed is the
one holding shard 0's lock."""
_KILLED_SERVICE: Final = {
    "api": "api-1",
    "worker": "worker-1",
    "projector": "projector-1",
}
_BROKER: Final = 2
_POLL_S: Final = 0.5


@dataclass
class Fault:
    what: str
    at: float
    """monotonic time of the kill"""
    at_s: float = 0.0
    """seconds since the run's epoch"""
    detail: dict[str, float | str | None] = field(default_factory=dict)
    recovery_s: dict[str, float | None] = field(default_factory=dict)
    """per consumer: seconds from the kill until it consumed past the kill (None: not in time)"""

    def figures(self) -> dict[str, object]:
        return {
            "what": self.what,
            "at_s": self.at_s,
            **self.detail,
            "recovery_s": self.recovery_s,
        }


async def _projected(shape: ProductionShape) -> int:
    """Records the read models hold (the live generations' offsets stored with them, the
    least of the projections): the projectors' progress, which Kafka's group offsets trail."""
    async with opened_store(shape.formation.dsn, max_size=1) as backend:
        rows = await projection_status(backend.projections(), None, "")
    live = [sum(r.offsets.values()) for r in rows if r.status == "live"]
    return min(live) if live else 0


async def _topic_and_groups(shape: ProductionShape) -> tuple[int, dict[str, int]]:
    """The events topic's records (sum of high-water marks), the records the projections
    applied and those the hook senders' group committed."""
    hooks = group_name("")
    states = await describe_topics(shape.kafka_settings, "", (hooks,))
    events = [s for s in states if s.topic == EVENTS.full_name("")]
    total = sum(s.high_water for s in events)
    committed = {
        "projections": await _projected(shape),
        "hooks": sum(s.committed.get(hooks) or 0 for s in events),
    }
    return total, committed


async def _probe(shape: ProductionShape) -> tuple[int, dict[str, int]] | None:
    # While a broker or the formation is down, a probe may fail: the next one tells.
    with contextlib.suppress(Exception):
        return await asyncio.wait_for(_topic_and_groups(shape), 10)
    return None


async def _recovery(shape: ProductionShape, fault: Fault, deadline_s: float) -> None:
    """Fill fault.recovery_s: the topic growing past its size at the kill, then each group
    committing past the topic's size at that moment."""
    at_kill = None
    while at_kill is None and time.monotonic() - fault.at < deadline_s:
        at_kill = await _probe(shape)
    if at_kill is None:
        fault.recovery_s = {"topic": None}
        return
    size, _ = at_kill
    target: int | None = None
    pending = set(at_kill[1])
    fault.recovery_s = {"topic": None, **dict.fromkeys(pending)}
    while time.monotonic() - fault.at < deadline_s and (target is None or pending):
        probed = await _probe(shape)
        now = round(time.monotonic() - fault.at, 2)
        if probed is not None:
            total, committed = probed
            if target is None and total > size:
                target, fault.recovery_s["topic"] = total, now
            for group in [g for g in pending if target is not None and committed[g] >= target]:
                fault.recovery_s[group] = now
                pending.discard(group)
        await asyncio.sleep(_POLL_S)


async def _kill_broker(shape: ProductionShape, fault: Fault, down_s: float) -> None:
    await asyncio.to_thread(shape.kafka.kill, _BROKER)
    fault.detail["node"] = _BROKER
    await asyncio.sleep(down_s)
    started = time.monotonic()
    await asyncio.to_thread(shape.kafka.restart, _BROKER)
    fault.detail["down_s"] = round(time.monotonic() - fault.at, 2)
    fault.detail["restart_s"] = round(time.monotonic() - started, 2)


async def _kill_primary(shape: ProductionShape, fault: Fault) -> None:
    primary = await shape.formation.primary()
    fault.at = time.monotonic()  # the kill itself: the write gap is measured from here
    old = await shape.formation.kill_primary(primary)
    fault.detail["killed"] = old.name
    new = await shape.formation.wait_promoted(old, timeout_s=120)
    fault.detail["promoted"] = new.name
    fault.detail["promoted_s"] = round(time.monotonic() - fault.at, 2)
    # The old primary comes back as the new standby, so the next round fails over again.
    await shape.formation.rejoin(old)
    fault.detail["rejoined_s"] = round(time.monotonic() - fault.at, 2)


def _active_relay(shape: ProductionShape, shard: int) -> str:
    """The relay holding the shard's lock: of the shard's running relays, the one that most
    recently logged becoming active (since its last start)."""
    latest: dict[str, str] = {}
    for name, service in shape.services.items():
        if not (name.startswith(f"relay-{shard}-") and service.running):
            continue
        since_start = service.log_path.read_text().rsplit("--- chaos: start", 1)[-1]
        for line in since_start.splitlines():
            if '"event": "active"' in line:
                with contextlib.suppress(orjson.JSONDecodeError):
                    latest[name] = str(orjson.loads(line).get("timestamp", ""))
    return max(latest, key=lambda name: latest[name]) if latest else f"relay-{shard}-1"


async def inflict(
    shape: ProductionShape, what: str, *, broker_down_s: float, deadline_s: float
) -> Fault:
    """Kill `what`, wait for the platform to carry on (bounded by deadline_s), and say how long
    each part took."""
    fault = Fault(what, time.monotonic(), shape.since())
    actions: dict[str, Callable[[], Awaitable[None]]] = {
        "broker": lambda: _kill_broker(shape, fault, broker_down_s),
        "postgres": lambda: _kill_primary(shape, fault),
    }
    if what in actions:
        await asyncio.gather(actions[what](), _recovery(shape, fault, deadline_s))
        return fault
    name = _active_relay(shape, shard=0) if what == "relay" else _KILLED_SERVICE[what]
    fault.detail["killed"] = name
    service = shape.services[name]
    starts = service.starts
    if not service.kill():
        fault.detail["killed"] = f"{name} (was not running)"

    async def back() -> None:
        while time.monotonic() - fault.at < deadline_s and not (
            service.starts > starts and service.running
        ):
            await asyncio.sleep(0.1)
        fault.detail["restarted_s"] = round(time.monotonic() - fault.at, 2)

    await asyncio.gather(back(), _recovery(shape, fault, deadline_s))
    return fault
