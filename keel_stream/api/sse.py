"""The SSE stream of a session: catch-up from the ledger, then live, by seq.

The `id:` of a frame is the event's seq; a client resumes with Last-Event-ID (or `after`) and the
first frame it gets is cursor+1. Every event is sent exactly once and in order, whichever source
announced it: frames from Kafka are used when they are the next seq, anything else reads the
ledger after the cursor. `event: partial` frames (with `partials=1`) carry no id and are never
replayed. When the api drains (SIGTERM), the stream first sends what it has not sent, then
`event: drain` with `{"retry_after_ms": 3000}`, and ends.

Partials never trail: once a stream has sent a generation's committed assistant.message, it
drops that generation's partials (they travel through Kafka and can arrive after the commit's
NOTIFY; the complete message is already on the stream).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any, Final

import orjson
from sse_starlette import ServerSentEvent

from keel_stream.api.hub import Frame, Partial, Subscription, Subscriptions, Wake
from keel_stream.errors import StoreUnavailable
from keel_stream.kernel.types import Event
from keel_stream.logs import get_logger
from keel_stream.store.protocol import MAX_READ_LIMIT, Ledger

__all__ = ["DRAIN_RETRY_MS", "SENT_GENERATIONS_KEPT", "SentGenerations", "session_stream"]

_log = get_logger("api.sse")

DRAIN_RETRY_MS: Final = 3000
SENT_GENERATIONS_KEPT: Final = 256
_ANSWER: Final = "assistant.message"


class SentGenerations:
    """The generationIds of the assistant.message frames a stream has sent (the newest
    `limit` of them): a partial of one of those generations would trail its committed message."""

    def __init__(self, limit: int = SENT_GENERATIONS_KEPT) -> None:
        self._limit = limit
        self._ids: OrderedDict[str, None] = OrderedDict()

    def sent(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Note a committed frame as it is sent (only assistant.message counts)."""
        generation = payload.get("generationId")
        if kind != _ANSWER or not isinstance(generation, str):
            return
        self._ids[generation] = None
        self._ids.move_to_end(generation)
        while len(self._ids) > self._limit:
            self._ids.popitem(last=False)

    def admits(self, partial: Mapping[str, Any]) -> bool:
        """Whether a partial frame may still be sent: its generation is not yet committed here."""
        generation = partial.get("generationId")
        return not (isinstance(generation, str) and generation in self._ids)


def _payload_of(data: Mapping[str, Any]) -> Mapping[str, Any]:
    payload = data.get("payload")
    return payload if isinstance(payload, Mapping) else {}


def _event_frame(seq: int, kind: str, data: dict[str, Any]) -> bytes:
    return ServerSentEvent(data=orjson.dumps(data).decode(), event=kind, id=str(seq)).encode()


def _from_ledger(event: Event) -> bytes:
    return _event_frame(event.seq, event.kind, event.model_dump(mode="json"))


class _Stream:
    """The state of one stream: the cursor (the last seq sent) and the answers sent."""

    def __init__(self, ledger: Ledger, tenant: str, session: str, after: int) -> None:
        self._ledger = ledger
        self._tenant = tenant
        self._session = session
        self.cursor = after
        self.answered = SentGenerations()

    async def catch_up(self) -> AsyncIterator[bytes]:
        """Every committed event after the cursor, from the ledger."""
        while True:
            page = await self._ledger.read_events(
                self._tenant, self._session, after=self.cursor, limit=MAX_READ_LIMIT
            )
            for event in page:
                self.answered.sent(event.kind, event.payload)
                yield _from_ledger(event)
                self.cursor = event.seq
            if len(page) < MAX_READ_LIMIT:
                return

    async def on_signal(self, signal: Wake | Frame | Partial) -> AsyncIterator[bytes]:
        """The frames a live signal makes due: a partial still current, the next frame, or
        (for anything newer than the next seq) a catch-up from the ledger."""
        if isinstance(signal, Partial):
            if self.answered.admits(signal.data):
                yield ServerSentEvent(
                    data=orjson.dumps(signal.data).decode(), event="partial"
                ).encode()
        elif isinstance(signal, Frame) and signal.seq == self.cursor + 1:
            self.answered.sent(signal.kind, _payload_of(signal.data))
            yield _event_frame(signal.seq, signal.kind, signal.data)
            self.cursor = signal.seq
        elif signal.seq > self.cursor:
            async for chunk in self.catch_up():
                yield chunk


async def session_stream(
    ledger: Ledger,
    hub: Subscriptions,
    tenant: str,
    session: str,
    *,
    after: int,
    partials: bool,
    draining: asyncio.Event,
    heartbeat_s: float = 15.0,
) -> AsyncGenerator[bytes, None]:
    subscription = hub.subscribe(tenant, session, partials)
    stream = _Stream(ledger, tenant, session, after)
    drain = asyncio.create_task(draining.wait())
    try:
        async for chunk in _until_store_fails(_live(stream, subscription, drain, heartbeat_s)):
            yield chunk
    finally:
        # A client that goes away cancels the stream inside asyncio.wait: the pending get
        # would outlive the subscription, and be destroyed pending (an error line) when
        # collected. Cancelled, both tasks end on the loop's next turn.
        drain.cancel()
        hub.unsubscribe(subscription)


async def _until_store_fails(frames: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """The frames; when the database fails mid-stream (the response has started, no error
    status can be sent), a `drain` frame asking the client to reconnect later, and the end."""
    try:
        async for chunk in frames:
            yield chunk
    except StoreUnavailable as exc:
        _log.warning("stream ended: database unavailable", error=exc.message)
        data = {"retry_after_ms": DRAIN_RETRY_MS, "reason": StoreUnavailable.code}
        yield ServerSentEvent(data=orjson.dumps(data).decode(), event="drain").encode()
    finally:
        await frames.aclose()


async def _live(
    stream: _Stream,
    subscription: Subscription,
    drain: asyncio.Task[bool],
    heartbeat_s: float,
) -> AsyncGenerator[bytes, None]:
    item: asyncio.Task[Wake | Frame | Partial] | None = None
    try:
        async for chunk in stream.catch_up():
            yield chunk
        while True:
            item = asyncio.create_task(subscription.queue.get())
            done, _ = await asyncio.wait(
                {item, drain}, timeout=heartbeat_s, return_when=asyncio.FIRST_COMPLETED
            )
            if drain in done:
                item.cancel()
                async for chunk in stream.catch_up():
                    yield chunk
                yield ServerSentEvent(
                    data=orjson.dumps({"retry_after_ms": DRAIN_RETRY_MS}).decode(), event="drain"
                ).encode()
                return
            if item not in done:
                item.cancel()
                # The backstop: a missed wake-up (say, a lost LISTEN connection) costs at most
                # one heartbeat interval, never an event.
                async for chunk in stream.catch_up():
                    yield chunk
                yield ServerSentEvent(comment="heartbeat").encode()
                continue
            async for chunk in stream.on_signal(item.result()):
                yield chunk
    finally:
        if item is not None:
            item.cancel()
