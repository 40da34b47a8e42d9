"""Readiness: whether this API process should take traffic, and each dependency's state now.

- database: answers and is migrated (asked on every call: one cheap query).
- kafka (with a broker configured): the broker answers now: its cluster id, asked with a short
  timeout.
- readModels (with a broker configured): the projections worker's consumer group has been live
  (keel_stream.dev.readiness) on this broker incarnation (its cluster id). Until then a commit
  is in the ledger but no read model applies it, and a read with min_seq waits for nothing.
- hooksSender, triggerScheduler: whether a `keel-stream hooks run` / `keel-stream triggers run`
  beats now (keel_stream.api.presence). Reported, never gating: readiness says whether this
  process should take traffic, and it serves every route without them (hook deliveries and
  trigger firings wait in the database for one to run).

The API is ready when the database is and the read models have been live on the broker as it is
now. Once open, the read models' gate stays open while the group is rebalancing, the projector
restarting or the broker away: writes and streams keep working (streams follow NOTIFY), and the
body says what is down. Only a broker of another incarnation (another cluster id: an emptied
embedded broker, a re-created cluster) closes it again, until the projector is live on that one.

The broker's answers are cached for CACHE_S, and one question is in flight at a time, so
/readyz stays cheap however often it is polled.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, Final

from keel_stream.api.presence import CACHE_S, Running
from keel_stream.errors import BrokerError, ProjectionBehind, StoreError, StoreUnavailable
from keel_stream.kafka.incarnation import cluster_id, group_live
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.store.service_heartbeats import MISSED_BEATS, ServiceKind
from keel_stream.store.sessions import Sessions

__all__ = ["CACHE_S", "TIMEOUT_S", "BrokerCheck", "BrokerProbe", "Readiness", "Report"]

TIMEOUT_S: Final = 2.0
"""How long the broker has to answer one question."""


@dataclass(frozen=True, slots=True)
class BrokerCheck:
    answers: bool
    cluster: str | None
    """The broker's cluster id; None when it did not answer."""
    group_live: bool | None
    """Whether the projections worker's group is live; None when that is not known."""
    error: str | None = None


class BrokerProbe:
    """Asks the broker (cached for cache_s, one question at a time)."""

    def __init__(
        self,
        kafka: KafkaSettings,
        group: str,
        cache_s: float = CACHE_S,
        timeout_s: float = TIMEOUT_S,
    ) -> None:
        self._kafka = kafka
        self._group = group
        self._cache_s = cache_s
        self._timeout_s = timeout_s
        self._lock = asyncio.Lock()
        self._last: BrokerCheck | None = None
        self._asked_at = 0.0

    async def check(self) -> BrokerCheck:
        async with self._lock:
            if self._last is None or time.monotonic() - self._asked_at >= self._cache_s:
                self._last = await self._ask()
                self._asked_at = time.monotonic()
            return self._last

    async def _ask(self) -> BrokerCheck:
        try:
            cluster = await asyncio.wait_for(cluster_id(self._kafka), self._timeout_s)
        except (BrokerError, TimeoutError) as exc:
            return BrokerCheck(False, None, None, _reason(exc))
        try:
            live = await asyncio.wait_for(group_live(self._kafka, self._group), self._timeout_s)
        except (BrokerError, TimeoutError) as exc:
            return BrokerCheck(True, cluster, None, _reason(exc))
        return BrokerCheck(True, cluster, live)


def _reason(exc: Exception) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {TIMEOUT_S:g}s"
    return str(exc)


@dataclass(frozen=True, slots=True)
class Report:
    ready: bool
    body: dict[str, Any]


class Readiness:
    """The readiness of one API process: its probe of the broker and the read models' gate."""

    def __init__(
        self, kafka: KafkaSettings | None, group: str, probe: BrokerProbe | None = None
    ) -> None:
        self._group = group
        self._probe = probe or (BrokerProbe(kafka, group) if kafka is not None else None)
        self._live_on: str | None = None
        """The cluster id the group was seen live on (the gate is open while it is current)."""

    async def report(self, sessions: Sessions, live_source: bool, running: Running) -> Report:
        database, schema = await _database(sessions)
        kafka, models = await self._broker(live_source)
        failure: StoreError | None = None
        if not database["ok"]:
            failure = StoreUnavailable(f"not ready: {database['error']}")
        elif not models["ok"]:
            failure = ProjectionBehind(f"not ready: {models['error']}")
        body: dict[str, Any] = {
            "status": "ready" if failure is None else "not_ready",
            "schemaVersion": schema,
            "kafka": kafka["ok"],
            "dependencies": {
                "database": database,
                "kafka": kafka,
                "readModels": models,
                "hooksSender": _service(running, ServiceKind.HOOKS_SENDER, "hooks run"),
                "triggerScheduler": _service(
                    running, ServiceKind.TRIGGER_SCHEDULER, "triggers run"
                ),
            },
        }
        if failure is not None:
            body["error"] = {
                "code": failure.error_code,
                "message": failure.message,
                "retriable": failure.retriable,
            }
        return Report(failure is None, body)

    async def _broker(self, live_source: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        if self._probe is None:
            absent: dict[str, Any] = {"ok": False, "configured": False, "liveSource": False}
            return absent, {"ok": True, "checked": False, "live": None, "group": None}
        check = await self._probe.check()
        if check.cluster is not None and check.cluster != self._live_on:
            self._live_on = None  # another incarnation: its group has to be live on it first
        if check.group_live and check.cluster is not None:
            self._live_on = check.cluster
        kafka: dict[str, Any] = {
            "ok": check.answers,
            "configured": True,
            "liveSource": live_source and check.answers,
        }
        if not check.answers:
            kafka["error"] = check.error
        models: dict[str, Any] = {
            "ok": self._live_on is not None,
            "checked": True,
            "live": check.group_live,
            "group": self._group,
        }
        if not models["ok"]:
            models["error"] = _models_error(check, self._group)
        return kafka, models


def _models_error(check: BrokerCheck, group: str) -> str:
    if not check.answers:
        return f"the read models are not live yet: the broker does not answer ({check.error})"
    if check.group_live is None:
        return f"the read models are not live yet: group {group} not described ({check.error})"
    return (
        f"the read models are not live yet: the projections worker's group {group} has no "
        "live member on this broker (is `keel-stream projections run` running?)"
    )


def _service(running: Running, kind: ServiceKind, command: str) -> dict[str, Any]:
    """A background service's state; `missing` never makes the API not ready."""
    instances = running.count(kind)
    body: dict[str, Any] = {
        "ok": instances > 0,
        "status": "running" if instances else "missing",
        "instances": instances,
    }
    if not instances:
        body["error"] = running.error or (
            f"no `keel-stream {command}` has beaten within {MISSED_BEATS} of its heartbeat "
            "intervals"
        )
    return body


async def _database(sessions: Sessions) -> tuple[dict[str, Any], int | None]:
    try:
        version = await sessions.schema_version()
    except StoreError as exc:
        return {"ok": False, "schemaVersion": None, "error": exc.message}, None
    if version is None:
        return {"ok": False, "schemaVersion": None, "error": "the schema is not migrated"}, None
    return {"ok": True, "schemaVersion": version}, version
