"""SSE fan-out on the memory store: each event is read and encoded once per session for all its
streams, no stream queries the ledger on the live path, and a client that does not keep up has a
bounded queue (it catches up from the ledger, every event still once and in order)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

from keel_stream.api.fanout import Fanout, Frame, Partial, RangeReads, Subscription, Wake
from keel_stream.api.sse import session_stream
from keel_stream.errors import StoreUnavailable
from keel_stream.kernel import CommitRequest, Event
from keel_stream.store import MAX_READ_LIMIT, MemoryStore
from tests.support.wait import wait_until


class CountingStore(MemoryStore):
    """The memory ledger, counting the reads of streams (read_events) and of feeds
    (ledger_range); `down` makes both fail as a lost database does."""

    def __init__(self) -> None:
        super().__init__()
        self.stream_reads = 0
        self.feed_reads = 0
        self.down = False

    async def read_events(
        self, tenant_id: str, session_id: str, after: int = 0, limit: int = 100
    ) -> list[Event]:
        self.stream_reads += 1
        if self.down:
            raise StoreUnavailable("read events: the database is away")
        return await super().read_events(tenant_id, session_id, after, limit)

    async def ledger_range(
        self, tenant: str, session: str, after: int, upto: int = 2**62
    ) -> list[Event]:
        self.feed_reads += 1
        if self.down:
            raise StoreUnavailable("read ledger range: the database is away")
        page = await super().read_events(tenant, session, after, MAX_READ_LIMIT)
        return [event for event in page if event.seq <= upto]


async def new_store() -> CountingStore:
    store = CountingStore()
    await store.create_tenant("acme")
    await store.create_session("acme", "s1")
    return store


async def say(store: MemoryStore, text: str) -> int:
    request = CommitRequest(
        tenant_id="acme", session_id="s1", kind="user.message", payload={"text": text}
    )
    return (await store.commit(request)).seq


def open_stream(
    store: CountingStore, hub: Any, after: int = 0, heartbeat_s: float = 30
) -> AsyncGenerator[bytes, None]:
    return session_stream(
        store, hub, "acme", "s1", after=after, partials=False, draining=asyncio.Event(),
        heartbeat_s=heartbeat_s,
    )  # fmt: skip


async def ids(stream: AsyncIterator[bytes], count: int) -> list[str]:
    """The `id:` of the next `count` event frames (heartbeats skipped)."""
    found: list[str] = []
    while len(found) < count:
        chunk = (await asyncio.wait_for(anext(stream), 5)).decode()
        found += [line[4:] for line in chunk.splitlines() if line.startswith("id: ")]
    return found


async def test_one_read_and_one_encode_per_event_for_every_stream_of_a_session() -> None:
    store = await new_store()
    hub = Fanout(RangeReads(store))
    subscriptions = [hub.subscribe("acme", "s1", False) for _ in range(3)]
    for n in (1, 2):
        hub.wake(("acme", "s1"), await say(store, f"m{n}"))
    await wait_until(lambda: _queued(subscriptions[0], 2), 5, "the feed to send both events")
    queues = [await s.take(0) for s in subscriptions]
    assert store.feed_reads <= 2, "one read per wake-up at most, never one per stream"
    assert [f.seq for f in queues[0] if isinstance(f, Frame)] == [1, 2]
    for first, second, third in zip(*queues, strict=True):
        assert first is second is third, "the same frame (and bytes) for every stream"
    assert isinstance(queues[0][0], Frame)
    assert queues[0][0].wire.startswith(b"id: 1\r\nevent: user.message\r\ndata: {")


async def _queued(subscription: Subscription, count: int) -> bool:
    return subscription.queued >= count


async def test_live_frames_need_no_ledger_query_per_stream() -> None:
    store = await new_store()
    hub = Fanout(RangeReads(store))
    streams = [open_stream(store, hub) for _ in range(5)]
    await say(store, "m1")
    for stream in streams:
        assert await ids(stream, 1) == ["1"]  # catch-up: one read per stream as it opens
    opened = store.stream_reads
    for n in (2, 3, 4):
        hub.wake(("acme", "s1"), await say(store, f"m{n}"))
    for stream in streams:
        assert await ids(stream, 3) == ["2", "3", "4"]
    assert store.stream_reads == opened, "no stream read the ledger for a live frame"
    assert 1 <= store.feed_reads <= 3
    for stream in streams:
        await stream.aclose()
    assert hub.streams == 0
    assert not hub.watches(("acme", "s1")), "nothing left behind"


async def test_a_kafka_frame_that_is_next_needs_no_read_and_a_stale_one_is_dropped() -> None:
    store = await new_store()
    hub = Fanout(RangeReads(store))
    subscription = hub.subscribe("acme", "s1", False)
    data = {"seq": 1, "kind": "user.message", "payload": {"text": "m1"}}
    hub.frame(("acme", "s1"), 1, "user.message", data)
    hub.frame(("acme", "s1"), 1, "user.message", data)
    assert [s.seq for s in await subscription.take(0) if isinstance(s, Frame)] == [1]
    for n in (1, 2, 3):
        await say(store, f"m{n}")
    hub.frame(("acme", "s1"), 3, "user.message", data)  # 2 was lost: the feed reads the gap
    await wait_until(lambda: _queued(subscription, 2), 5, "the feed to read the gap")
    assert store.feed_reads == 1
    assert [s.seq for s in await subscription.take(0) if isinstance(s, Frame)] == [2, 3]


async def test_partials_go_only_to_streams_that_asked_encoded_once() -> None:
    hub = Fanout(RangeReads(await new_store()))
    plain, wanting, also = (hub.subscribe("acme", "s1", p) for p in (False, True, True))
    hub.partial(("acme", "s1"), {"generationId": "g1", "delta": "he"})
    assert not await plain.take(0)
    (first,), (second,) = await wanting.take(0), await also.take(0)
    assert isinstance(first, Partial)
    assert first is second


async def test_a_queue_past_its_bound_becomes_one_wake_up_for_the_newest_seq() -> None:
    subscription = Subscription(("acme", "s1"), partials=True, max_frames=4, max_bytes=1 << 20)
    for seq in range(1, 11):
        subscription.offer(Frame(seq, "user.message", {"seq": seq}))
    subscription.offer(Partial({"generationId": "g", "delta": "x"}))
    taken = list(await subscription.take(0))
    assert subscription.overflows == 2  # at frames 5 and 9
    assert taken[0] == Wake(9), "frames 1-9 stand as a wake-up for 9: read from the ledger"
    assert [type(s).__name__ for s in taken[1:]] == ["Frame", "Partial"]


async def test_queued_bytes_are_bounded_too() -> None:
    subscription = Subscription(("acme", "s1"), partials=False, max_frames=1000, max_bytes=2000)
    big = {"text": "x" * 900}
    for seq in range(1, 4):
        subscription.offer(Frame(seq, "user.message", big))
    assert subscription.overflows == 1
    assert list(await subscription.take(0)) == [Wake(3)]


class BatchReads:
    """A store that reads many sessions at once, counting its calls."""

    def __init__(self, store: CountingStore) -> None:
        self.store = store
        self.calls: list[list[tuple[str, str, int]]] = []

    async def ledger_since(self, keys: Sequence[tuple[str, str, int]], limit: int) -> list[Event]:
        self.calls.append(list(keys))
        events: list[Event] = []
        for tenant, session, after in keys:
            events += await self.store.read_events(tenant, session, after, limit)
        return events


async def test_a_batch_reader_reads_every_due_session_in_one_call() -> None:
    store = await new_store()
    await store.create_session("acme", "s2")
    await store.create_session("acme", "s3")
    reads = BatchReads(store)
    hub = Fanout(reads, readers=1, batch=100)
    subscriptions = {s: hub.subscribe("acme", s, False) for s in ("s1", "s2", "s3")}
    for session in subscriptions:
        request = CommitRequest(
            tenant_id="acme", session_id=session, kind="user.message", payload={"text": "hi"}
        )
        hub.wake(("acme", session), (await store.commit(request)).seq)

    async def all_sent() -> bool:
        return all(s.queued for s in subscriptions.values())

    await wait_until(all_sent, 5, "every session's frame")
    assert [sorted(k[1] for k in call) for call in reads.calls] == [["s1", "s2", "s3"]]


class SmallQueues:
    """A hub whose subscriptions hold at most 3 frames."""

    def __init__(self, store: CountingStore) -> None:
        self.subscriptions: list[Subscription] = []

    def subscribe(self, tenant: str, session: str, partials: bool) -> Subscription:
        subscription = Subscription((tenant, session), partials, max_frames=3)
        self.subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self.subscriptions.remove(subscription)

    def offer(self, item: Frame | Wake) -> None:
        for subscription in self.subscriptions:
            subscription.offer(item)


async def test_a_slow_client_catches_up_from_the_ledger_every_event_once_in_order() -> None:
    store = await new_store()
    hub = SmallQueues(store)
    stream = open_stream(store, hub)
    await say(store, "m1")
    assert await ids(stream, 1) == ["1"]
    for n in range(2, 31):  # the client reads nothing meanwhile
        seq = await say(store, f"m{n}")
        event = (await store.read_events("acme", "s1", after=seq - 1, limit=1))[0]
        hub.offer(Frame(seq, event.kind, event.model_dump(mode="json")))
    (subscription,) = hub.subscriptions
    assert subscription.overflows > 0
    assert subscription.queued <= 3
    assert await ids(stream, 29) == [str(n) for n in range(2, 31)]
    await stream.aclose()


async def test_a_failed_feed_read_hands_the_wake_up_to_each_stream_which_drains() -> None:
    store = await new_store()
    hub = Fanout(RangeReads(store))
    stream = open_stream(store, hub)
    first = asyncio.ensure_future(anext(stream))
    await wait_until(_subscribed(hub), 5, "the stream to subscribe")
    store.down = True
    hub.wake(("acme", "s1"), 1)
    chunk = (await asyncio.wait_for(first, 5)).decode()
    assert "event: drain" in chunk
    assert '"reason":"store_unavailable"' in chunk
    assert (store.feed_reads, store.stream_reads) == (1, 2), "the stream read for itself"


def _subscribed(hub: Fanout) -> Any:
    async def check() -> bool:
        return hub.streams == 1

    return check
