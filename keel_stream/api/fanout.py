"""Fan-out of live events to SSE streams: per session, not per stream.

A session with streams has a feed, which remembers the newest seq it sent out. A wake-up past it
(a commit's NOTIFY) puts the feed on the due list; readers take due feeds and read what each has
not sent from the ledger, once for all the session's streams; a Kafka frame that is the feed's
next seq needs no read. Each event is encoded once (`Frame.wire`), and the same bytes go on every
subscriber's queue. Streams still check each frame against their own cursor and read the ledger
on a gap (keel_stream.api.sse), so a lost, late or repeated signal never skips or repeats an
event; when a feed's read fails, each of its streams gets the wake-up and reads for itself.

The ledger is read through a FeedReader: many sessions' new events in one call. RangeReads
implements it with one `ledger_range` per session (a batch of one: FEED_READERS reads in flight);
a store that reads many sessions in one query can be passed instead, with larger batches.

Queues are bounded (QUEUE_FRAMES frames, QUEUE_BYTES bytes): a client that does not keep up has
its queue replaced by one wake-up, and reads what it missed from the ledger when it reads again.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import orjson
from sse_starlette import ServerSentEvent

from keel_stream.kernel.types import Event
from keel_stream.logs import get_logger
from keel_stream.store import MAX_READ_LIMIT
from keel_stream.store.projection_state import LedgerReader

__all__ = [
    "FEED_READERS",
    "QUEUE_BYTES",
    "QUEUE_FRAMES",
    "Fanout",
    "FeedReader",
    "Frame",
    "Key",
    "Partial",
    "RangeReads",
    "Signal",
    "Subscription",
    "Wake",
    "encode_event",
]

Key = tuple[str, str]

QUEUE_FRAMES: Final = 1000
QUEUE_BYTES: Final = 1 << 20
FEED_READERS: Final = 16
"""Feed reads in flight at once (each of one session today): the pool serves requests too."""


def encode_event(seq: int, kind: str, data: Mapping[str, Any]) -> bytes:
    """An event's SSE frame: `id: seq`, `event: kind`, `data: the event as JSON`."""
    return ServerSentEvent(data=orjson.dumps(data).decode(), event=kind, id=str(seq)).encode()


@dataclass(frozen=True, slots=True)
class Wake:
    """Events up to seq are committed: a stream behind it reads them from the ledger."""

    seq: int


@dataclass(frozen=True, slots=True)
class Frame:
    """A committed event, encoded once (`wire`) for every stream it goes to."""

    seq: int
    kind: str
    data: dict[str, Any]
    wire: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "wire", encode_event(self.seq, self.kind, self.data))


@dataclass(frozen=True, slots=True)
class Partial:
    """A partial frame (no id), encoded once."""

    data: dict[str, Any]
    wire: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        encoded = ServerSentEvent(data=orjson.dumps(self.data).decode(), event="partial").encode()
        object.__setattr__(self, "wire", encoded)


Signal = Wake | Frame | Partial


class Subscription:
    """One stream's bounded queue of signals, taken all at once."""

    def __init__(
        self,
        key: Key,
        partials: bool,
        max_frames: int = QUEUE_FRAMES,
        max_bytes: int = QUEUE_BYTES,
    ) -> None:
        self.key = key
        self.partials = partials
        self.interrupted = False
        self.overflows = 0
        self._max_frames = max_frames
        self._max_bytes = max_bytes
        self._items: deque[Signal] = deque()
        self._bytes = 0
        self._waiter: asyncio.Future[None] | None = None

    def offer(self, item: Signal) -> None:
        size = 0 if isinstance(item, Wake) else len(item.wire)
        if len(self._items) >= self._max_frames or self._bytes + size > self._max_bytes:
            self._overflow(item)
        else:
            self._items.append(item)
            self._bytes += size
        self._notify()

    def _overflow(self, item: Signal) -> None:
        # The client does not keep up: what waits for it is dropped, and one wake-up for the
        # newest seq stands for it (the stream reads those events from the ledger).
        seqs = [s.seq for s in (*self._items, item) if not isinstance(s, Partial)]
        self._items.clear()
        self._bytes = 0
        self.overflows += 1
        if seqs:
            self._items.append(Wake(max(seqs)))

    @property
    def queued(self) -> int:
        """Signals waiting to be taken (at most max_frames)."""
        return len(self._items)

    def interrupt(self) -> None:
        """Wake the stream now, whatever is queued (it drains)."""
        self.interrupted = True
        self._notify()

    def _notify(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def take(self, wait_s: float) -> deque[Signal]:
        """What was offered since the last take, in order; waits up to `wait_s` for
        something (empty when nothing came, or when interrupted)."""
        if not self._items and not self.interrupted:
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                async with asyncio.timeout(wait_s):
                    await self._waiter
            except TimeoutError:
                return deque()
            finally:
                self._waiter = None
        items, self._items = self._items, deque()
        self._bytes = 0
        return items


class FeedReader(Protocol):
    async def ledger_since(self, keys: Sequence[tuple[str, str, int]], limit: int) -> list[Event]:
        """For each (tenant, session, after): the session's events with seq > after, at most
        `limit` of them, in seq order."""
        ...


class RangeReads:
    """A FeedReader of one ledger_range per session."""

    def __init__(self, ledger: LedgerReader) -> None:
        self._ledger = ledger

    async def ledger_since(self, keys: Sequence[tuple[str, str, int]], limit: int) -> list[Event]:
        pages = await asyncio.gather(
            *(self._ledger.ledger_range(t, s, after, after + limit) for t, s, after in keys)
        )
        return [event for page in pages for event in page]


@dataclass(eq=False)
class _Feed:
    subscribers: set[Subscription] = field(default_factory=set)
    after: int = -1
    """The newest seq sent out (at first: the one before the first seq announced); -1: none."""
    wanted: int = 0
    """The newest seq announced."""
    reading: bool = False


class Fanout:
    """The feeds of one process, one per session with subscribers."""

    def __init__(self, reader: FeedReader, readers: int = FEED_READERS, batch: int = 1) -> None:
        self._reader = reader
        self._max_readers = readers
        self._batch = batch
        self._feeds: dict[Key, _Feed] = {}
        self._due: dict[Key, _Feed] = {}
        self._readers: set[asyncio.Task[None]] = set()
        self._log = get_logger("api.hub")

    def subscribe(self, tenant: str, session: str, partials: bool) -> Subscription:
        subscription = Subscription((tenant, session), partials)
        self._feeds.setdefault(subscription.key, _Feed()).subscribers.add(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        feed = self._feeds.get(subscription.key)
        if feed is not None:
            feed.subscribers.discard(subscription)
            if not feed.subscribers:
                del self._feeds[subscription.key]
                self._due.pop(subscription.key, None)

    @property
    def streams(self) -> int:
        return sum(len(f.subscribers) for f in self._feeds.values())

    def watches(self, key: Key) -> bool:
        return key in self._feeds

    def wake(self, key: Key, seq: int) -> None:
        """`seq` is committed: the feed reads what it has not sent, once for all its streams."""
        feed = self._feeds.get(key)
        if feed is None:
            return
        if feed.after < 0:
            feed.after = seq - 1
        if seq <= feed.after:
            return
        feed.wanted = max(feed.wanted, seq)
        self._due[key] = feed
        if len(self._readers) < min(self._max_readers, len(self._due)):
            reader = asyncio.get_running_loop().create_task(self._read_due())
            self._readers.add(reader)
            reader.add_done_callback(self._readers.discard)

    def frame(self, key: Key, seq: int, kind: str, data: dict[str, Any]) -> None:
        """A frame from Kafka: sent as it is when it is the feed's next seq."""
        feed = self._feeds.get(key)
        if feed is None:
            return
        if feed.after < 0:
            feed.after = seq - 1
        if seq == feed.after + 1:
            self._send(feed, Frame(seq, kind, data))
        else:
            self.wake(key, seq)

    def partial(self, key: Key, data: dict[str, Any]) -> None:
        feed = self._feeds.get(key)
        wanting = [s for s in feed.subscribers if s.partials] if feed is not None else []
        if wanting:
            partial = Partial(data)
            for subscription in wanting:
                subscription.offer(partial)

    @staticmethod
    def _send(feed: _Feed, frame: Frame) -> None:
        feed.after = frame.seq
        for subscription in feed.subscribers:
            subscription.offer(frame)

    async def _read_due(self) -> None:
        while batch := self._next_batch():
            await self._read(batch)

    def _next_batch(self) -> dict[Key, _Feed]:
        """Up to `batch` due feeds that no reader reads now (those stay due)."""
        batch: dict[Key, _Feed] = {}
        for key, feed in list(self._due.items()):
            if len(batch) == self._batch:
                break
            if not feed.reading:
                del self._due[key]
                feed.reading = True
                batch[key] = feed
        return batch

    async def _read(self, batch: dict[Key, _Feed]) -> None:
        asked = {key: feed.wanted for key, feed in batch.items()}
        got: set[Key] = set()
        try:
            keys = [(*key, feed.after) for key, feed in batch.items()]
            for event in await self._reader.ledger_since(keys, MAX_READ_LIMIT):
                key = (event.tenant, event.session)
                feed = batch[key]
                got.add(key)
                if event.seq == feed.after + 1:  # a Kafka frame may have sent it meanwhile
                    self._send(feed, Frame(event.seq, event.kind, event.model_dump(mode="json")))
        except Exception as exc:  # noqa: BLE001 - each stream reads the ledger itself instead
            self._log.warning("live read failed", sessions=len(batch), error=repr(exc))
            for feed in batch.values():
                for subscription in feed.subscribers:
                    subscription.offer(Wake(feed.wanted))
            return
        finally:
            for feed in batch.values():
                feed.reading = False
        for key, feed in batch.items():
            # Still behind: a page was full, or newer seqs were announced meanwhile (one that
            # was announced but is not in the ledger is left to the streams' own reads).
            if (
                feed.subscribers
                and feed.after < feed.wanted
                and (key in got or feed.wanted > asked[key])
            ):
                self._due[key] = feed

    async def close(self) -> None:
        for reader in list(self._readers):
            reader.cancel()
        await asyncio.gather(*self._readers, return_exceptions=True)
