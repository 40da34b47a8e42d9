"""The SSE stream of a session: catch-up from the ledger, then live, by seq.

The `id:` of a frame is the event's seq; a client resumes with Last-Event-ID (or `after`) and the
first frame it gets is cursor+1. Every event is sent exactly once and in order, whichever source
announced it: a live frame (read and encoded once per session by the hub) goes out as it is when
it is the next seq; anything newer reads the ledger after the cursor. `event: partial` frames
(with `partials=1`) carry no id and are never replayed. When the api drains (SIGTERM), the stream
first sends what it has not sent, then `event: drain` with `{"retry_after_ms": 3000}`, and ends.

Partials never trail: once a stream has sent a generation's committed assistant.message, it
drops that generation's partials (they travel through Kafka and can arrive after the commit's
NOTIFY; the complete message is already on the stream).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Mapping
from typing import Any, Final

import orjson
from sse_starlette import ServerSentEvent

from keel_stream.api.fanout import Frame, Partial, Signal, Subscription, encode_event
from keel_stream.api.hub import Subscriptions
from keel_stream.errors import StoreUnavailable
from keel_stream.kernel.types import Event
from keel_stream.logs import get_logger
from keel_stream.store.protocol import MAX_READ_LIMIT, Ledger

__all__ = ["DRAIN_RETRY_MS", "SENT_GENERATIONS_KEPT", "SentGenerations", "session_stream"]

_log = get_logger("api.sse")

DRAIN_RETRY_MS: Final = 3000
SENT_GENERATIONS_KEPT: Final = 256
_ANSWER: Final = "assistant.message"
_HEARTBEAT: Final = ServerSentEvent(comment="heartbeat").encode()


def _drain_frame(**extra: object) -> bytes:
    data = orjson.dumps({"retry_after_ms": DRAIN_RETRY_MS, **extra}).decode()
    return ServerSentEvent(data=data, event="drain").encode()


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
                yield self._sent(event)
            if len(page) < MAX_READ_LIMIT:
                return

    def _sent(self, event: Event) -> bytes:
        self.answered.sent(event.kind, event.payload)
        self.cursor = event.seq
        return encode_event(event.seq, event.kind, event.model_dump(mode="json"))

    async def on_signals(self, signals: Iterable[Signal]) -> AsyncIterator[bytes]:
        """The frames live signals make due, in order: a partial still current, the next frame
        (as the hub encoded it), or, for anything newer than the next seq, a catch-up."""
        for signal in signals:
            if isinstance(signal, Partial):
                if self.answered.admits(signal.data):
                    yield signal.wire
            elif isinstance(signal, Frame) and signal.seq == self.cursor + 1:
                self.answered.sent(signal.kind, _payload_of(signal.data))
                self.cursor = signal.seq
                yield signal.wire
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
    drain = asyncio.ensure_future(draining.wait())
    drain.add_done_callback(lambda _: subscription.interrupt())
    frames = _live(_Stream(ledger, tenant, session, after), subscription, heartbeat_s)
    try:
        async for chunk in frames:
            yield chunk
    except StoreUnavailable as exc:
        # The database failed mid-stream (the response has started, no error status can be
        # sent): a drain frame asks the client to reconnect later, and the stream ends.
        _log.warning("stream ended: database unavailable", error=exc.message)
        yield _drain_frame(reason=StoreUnavailable.code)
    finally:
        await frames.aclose()
        # A client that goes away cancels the stream while it waits: the drain task would
        # outlive the subscription, and be destroyed pending (an error line) when collected.
        drain.cancel()
        hub.unsubscribe(subscription)


async def _live(
    stream: _Stream, subscription: Subscription, heartbeat_s: float
) -> AsyncGenerator[bytes, None]:
    async for chunk in stream.catch_up():
        yield chunk
    while True:
        signals = await subscription.take(heartbeat_s)
        if subscription.interrupted:
            async for chunk in stream.catch_up():
                yield chunk
            yield _drain_frame()
            return
        if not signals:
            # The backstop: a missed wake-up (say, a lost LISTEN connection) costs at most
            # one heartbeat interval, never an event.
            async for chunk in stream.catch_up():
                yield chunk
            yield _HEARTBEAT
            continue
        async for chunk in stream.on_signals(signals):
            yield chunk
