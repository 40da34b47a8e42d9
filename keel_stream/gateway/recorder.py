"""Backend facts into the ledger: every backend event, message and lifecycle change of an
external session is committed as an ``external.event`` (seed §4: SSE replays only what Keel
recorded, never a live pass-through of backend frames).

Backend events are committed in the backend's own order, one queue per session, each keyed by
its backend seq (``requestId = backend:<seq>``), so a re-subscription that replays events already
recorded commits nothing twice.  A commit that fails for a reason retrying cannot fix (the session
was closed, the payload is refused) is dropped with a log line; an unavailable database is
retried with backoff for a bounded time, and the events are replayed from the backend's log at
the next subscription (``afterSeq`` = the last recorded backend seq).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from keel_stream.errors import KeelError
from keel_stream.gateway.protocol import Event as BackendEvent
from keel_stream.kernel import CommitRequest, Kind, Submission
from keel_stream.logs import get_logger
from keel_stream.retry import RetryPolicy, retrying
from keel_stream.store.protocol import ExternalStatus, Ledger, Metering

__all__ = ["Direction", "ExternalTarget", "Recorder", "inbound_payload"]

_STORE_RETRIES: Final = 8
_FINISHED: Final = "turn.finished"


class Direction:
    INBOUND: Final = "inbound"
    """From the backend: its events."""
    OUTBOUND: Final = "outbound"
    """To the backend: messages and cancels Keel delivered."""
    LIFECYCLE: Final = "lifecycle"
    """The gateway's own record: opened, unavailable, resumed, closed."""


@dataclass
class ExternalTarget:
    """One external session as the gateway routes it."""

    tenant: str
    session: str
    backend: str
    ref: str
    metering: Metering = Metering.EXTERNAL
    status: ExternalStatus = ExternalStatus.ACTIVE
    last_backend_seq: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    """Serializes this session's deliveries (one input at a time, in commit order)."""

    @property
    def key(self) -> tuple[str, str]:
        return (self.tenant, self.session)


def base_payload(target: ExternalTarget, direction: str, kind: str) -> dict[str, Any]:
    return {
        "backend": target.backend,
        "externalRef": target.ref,
        "stateOwner": "external",
        "direction": direction,
        "type": kind,
    }


def inbound_payload(target: ExternalTarget, event: BackendEvent) -> dict[str, Any]:
    """The external.event for one backend event.  A finished turn of a metered session records
    its usage, or ``usageReported: false`` when the backend sent none: never a silent 0."""
    payload = base_payload(target, Direction.INBOUND, event.type)
    payload["backendSeq"] = event.seq
    if event.turn_id is not None:
        payload["turnId"] = event.turn_id
    payload["data"] = dict(event.data)
    if event.type == _FINISHED and target.metering == Metering.EXTERNAL:
        usage = event.data.get("usage")
        payload["usageReported"] = isinstance(usage, Mapping)
        payload["usage"] = dict(usage) if isinstance(usage, Mapping) else None
    return payload


class Recorder:
    """Commits external.events through the kernel, like every other fact."""

    def __init__(self, ledger: Ledger, retry_initial_s: float = 0.2) -> None:
        self._ledger = ledger
        self._queues: dict[tuple[str, str], asyncio.Queue[BackendEvent]] = {}
        self._tasks: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._retry = RetryPolicy(
            attempts=_STORE_RETRIES, deadline_s=None, initial_s=retry_initial_s, maximum_s=5.0
        )
        self._log = get_logger("gateway")

    async def commit(self, target: ExternalTarget, payload: dict[str, Any], key: str) -> Submission:
        return await self._ledger.commit(
            CommitRequest(
                tenant_id=target.tenant,
                session_id=target.session,
                kind=Kind.EXTERNAL_EVENT,
                payload=payload,
                key=key,
            )
        )

    async def lifecycle(
        self, target: ExternalTarget, kind: str, key: str, data: Mapping[str, Any] | None = None
    ) -> Submission | None:
        """Record a lifecycle change; None (logged) when the ledger refuses it."""
        payload = base_payload(target, Direction.LIFECYCLE, kind)
        if data:
            payload["data"] = dict(data)
        try:
            return await self.commit(target, payload, key)
        except KeelError as exc:
            self._log.warning(
                "lifecycle not recorded", session=target.session, kind=kind, error=str(exc)
            )
            return None

    def enqueue(self, target: ExternalTarget, event: BackendEvent) -> None:
        """Record a backend event after those already queued for its session."""
        queue = self._queues.setdefault(target.key, asyncio.Queue())
        queue.put_nowait(event)
        task = self._tasks.get(target.key)
        if task is None or task.done():
            self._tasks[target.key] = asyncio.create_task(self._drain(target, queue))

    async def _drain(self, target: ExternalTarget, queue: asyncio.Queue[BackendEvent]) -> None:
        while not queue.empty():
            event = queue.get_nowait()
            if event.seq <= target.last_backend_seq:
                continue
            if await self._record(target, event):
                target.last_backend_seq = event.seq

    async def _record(self, target: ExternalTarget, event: BackendEvent) -> bool:
        payload = inbound_payload(target, event)

        async def commit() -> None:
            await self.commit(target, payload, f"backend:{event.seq}")

        try:
            await retrying(commit, "record backend event", self._retry, self._log)
        except KeelError as exc:  # refused, or the store away past the policy's bound
            self._log.error(
                "backend event not recorded",
                session=target.session,
                backend_seq=event.seq,
                code=exc.code,
                error=str(exc),
            )
            return False
        return True

    async def idle(self) -> None:
        """Wait until every queued event is recorded (or given up)."""
        while tasks := [t for t in self._tasks.values() if not t.done()]:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def close(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks.clear()
