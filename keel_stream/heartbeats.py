"""A background service's heartbeat: while a hooks sender or a trigger scheduler runs, its row
in the service heartbeats is fresh, so the API can say whether one runs (`hooks` and `triggers`
in GET /v1/capabilities, /readyz's dependencies; docs/operations.md#readiness)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from collections.abc import AsyncIterator
from typing import Final

from keel_stream.errors import KeelError
from keel_stream.logs import get_logger
from keel_stream.store.service_heartbeats import ServiceHeartbeats, ServiceKind

__all__ = ["END_TIMEOUT_S", "beating", "instance_name"]

_log = get_logger("keel_stream.heartbeats")

END_TIMEOUT_S: Final = 2.0
"""How long a graceful stop waits to remove its row (else the row goes stale)."""


def instance_name() -> str:
    """`host:pid:random`: a restarted process never beats in its predecessor's row."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@contextlib.asynccontextmanager
async def beating(
    heartbeats: ServiceHeartbeats, kind: ServiceKind, interval_s: float
) -> AsyncIterator[str]:
    """Beat the kind's row now and every interval_s while the body runs; remove the row when
    the body ends, however it ends (a killed process's row goes stale instead). A failed beat
    is logged and the service goes on: it only stops counting until a beat succeeds."""
    instance = instance_name()
    await _beat(heartbeats, kind, instance, interval_s)
    task = asyncio.create_task(_beat_every(heartbeats, kind, instance, interval_s))
    try:
        yield instance
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        with contextlib.suppress(KeelError, TimeoutError):
            await asyncio.wait_for(heartbeats.end(kind, instance), END_TIMEOUT_S)


async def _beat_every(
    heartbeats: ServiceHeartbeats, kind: ServiceKind, instance: str, interval_s: float
) -> None:
    while True:
        await asyncio.sleep(interval_s)
        await _beat(heartbeats, kind, instance, interval_s)


async def _beat(
    heartbeats: ServiceHeartbeats, kind: ServiceKind, instance: str, interval_s: float
) -> None:
    try:
        await heartbeats.beat(kind, instance, interval_s)
    except KeelError as exc:
        _log.warning("service heartbeat failed", kind=kind.value, error=str(exc))
