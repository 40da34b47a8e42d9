"""The SSE stream of a session: catch-up from the ledger, then live, by seq.

The `id:` of a frame is the event's seq; a client resumes with Last-Event-ID (or `after`) and the
first frame it gets is cursor+1. Every event is sent exactly once and in order, whichever source
announced it: frames from Kafka are used when they are the next seq, anything else reads the
ledger after the cursor. `event: partial` frames (with `partials=1`) carry no id and are never
replayed. When the api drains (SIGTERM), the stream first sends what it has not sent, then
`event: drain` with `{"retry_after_ms": 3000}`, and ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Final

import orjson
from sse_starlette import ServerSentEvent

from keel_stream.api.hub import Frame, LiveHub, Partial, Wake
from keel_stream.kernel.types import Event
from keel_stream.store.postgres import MAX_READ_LIMIT, PostgresLedger

__all__ = ["DRAIN_RETRY_MS", "session_stream"]

DRAIN_RETRY_MS: Final = 3000


def _event_frame(seq: int, kind: str, data: dict[str, Any]) -> bytes:
    return ServerSentEvent(data=orjson.dumps(data).decode(), event=kind, id=str(seq)).encode()


def _from_ledger(event: Event) -> bytes:
    return _event_frame(event.seq, event.kind, event.model_dump(mode="json"))


async def session_stream(
    ledger: PostgresLedger,
    hub: LiveHub,
    tenant: str,
    session: str,
    *,
    after: int,
    partials: bool,
    draining: asyncio.Event,
    heartbeat_s: float = 15.0,
) -> AsyncIterator[bytes]:
    subscription = hub.subscribe(tenant, session, partials)
    cursor = after

    async def catch_up() -> AsyncIterator[bytes]:
        nonlocal cursor
        while True:
            page = await ledger.read_events(tenant, session, after=cursor, limit=MAX_READ_LIMIT)
            for event in page:
                yield _from_ledger(event)
                cursor = event.seq
            if len(page) < MAX_READ_LIMIT:
                return

    drain = asyncio.create_task(draining.wait())
    try:
        async for chunk in catch_up():
            yield chunk
        while True:
            item = asyncio.create_task(subscription.queue.get())
            done, _ = await asyncio.wait(
                {item, drain}, timeout=heartbeat_s, return_when=asyncio.FIRST_COMPLETED
            )
            if drain in done:
                item.cancel()
                async for chunk in catch_up():
                    yield chunk
                yield ServerSentEvent(
                    data=orjson.dumps({"retry_after_ms": DRAIN_RETRY_MS}).decode(), event="drain"
                ).encode()
                return
            if item not in done:
                item.cancel()
                # The backstop: a missed wake-up (say, a lost LISTEN connection) costs at most
                # one heartbeat interval, never an event.
                async for chunk in catch_up():
                    yield chunk
                yield ServerSentEvent(comment="heartbeat").encode()
                continue
            signal = item.result()
            if isinstance(signal, Partial):
                yield ServerSentEvent(
                    data=orjson.dumps(signal.data).decode(), event="partial"
                ).encode()
            elif isinstance(signal, Frame) and signal.seq == cursor + 1:
                yield _event_frame(signal.seq, signal.kind, signal.data)
                cursor = signal.seq
            elif isinstance(signal, Frame | Wake) and signal.seq > cursor:
                async for chunk in catch_up():
                    yield chunk
    finally:
        drain.cancel()
        hub.unsubscribe(subscription)
