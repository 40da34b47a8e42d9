"""The SSE merge on the memory store: every committed event once and in order, whichever
source announces it (NOTIFY wake-ups, Kafka frames, heartbeats), partials never replayed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from keel_stream.api.hub import Frame, Partial, Subscription, Wake
from keel_stream.api.sse import session_stream
from keel_stream.kernel import CommitRequest
from keel_stream.store import MemoryStore
from tests.support.wait import wait_until


class Signals:
    """A hand-fed live source."""

    def __init__(self) -> None:
        self.subscriptions: list[Subscription] = []

    def subscribe(self, tenant: str, session: str, partials: bool) -> Subscription:
        subscription = Subscription((tenant, session), partials)
        self.subscriptions.append(subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        self.subscriptions.remove(subscription)

    def offer(self, item: Wake | Frame | Partial) -> None:
        for subscription in self.subscriptions:
            subscription.offer(item)


async def ledger_with(count: int) -> MemoryStore:
    store = MemoryStore()
    await store.create_tenant("acme")
    await store.create_session("acme", "s1")
    for i in range(count):
        await say(store, i)
    return store


async def say(store: MemoryStore, i: int) -> int:
    request = CommitRequest(
        tenant_id="acme", session_id="s1", kind="user.message", payload={"text": f"m{i}"}
    )
    return (await store.commit(request)).seq


def parse(chunk: bytes) -> dict[str, str]:
    fields: dict[str, str] = {}
    for line in chunk.decode().splitlines():
        name, _, value = line.partition(": ")
        if name in ("id", "event", "data"):
            fields[name] = value
    return fields


async def take(stream: AsyncIterator[bytes], count: int) -> list[dict[str, str]]:
    frames: list[dict[str, str]] = []
    while len(frames) < count:
        chunk = await asyncio.wait_for(anext(stream), 5)
        if chunk.startswith(b":"):
            continue
        frames.append(parse(chunk))
    return frames


def open_stream(
    store: MemoryStore, signals: Signals, after: int = 0, **options: Any
) -> tuple[AsyncGenerator[bytes, None], asyncio.Event]:
    draining = asyncio.Event()
    stream = session_stream(
        store, signals, "acme", "s1", after=after, partials=True, draining=draining,
        heartbeat_s=options.get("heartbeat_s", 30),
    )  # fmt: skip
    return stream, draining


async def test_catch_up_resumes_after_the_cursor() -> None:
    store = await ledger_with(5)
    stream, _ = open_stream(store, Signals(), after=2)
    assert [f["id"] for f in await take(stream, 3)] == ["3", "4", "5"]
    await stream.aclose()


async def test_a_gap_in_live_frames_is_filled_from_the_ledger_and_duplicates_dropped() -> None:
    store = await ledger_with(1)
    signals = Signals()
    stream, _ = open_stream(store, signals)
    assert [f["id"] for f in await take(stream, 1)] == ["1"]
    for i in (1, 2, 3):
        await say(store, i)
    # Kafka delivers seq 4 first (3 and 2 were lost), then a stale duplicate of 1.
    signals.offer(Frame(4, "user.message", {"seq": 4}))
    signals.offer(Frame(1, "user.message", {"seq": 1}))
    signals.offer(Wake(4))
    assert [f["id"] for f in await take(stream, 3)] == ["2", "3", "4"]
    await say(store, 4)
    signals.offer(Wake(5))
    assert [f["id"] for f in await take(stream, 1)] == ["5"]
    await stream.aclose()


async def test_a_missed_wake_up_costs_one_heartbeat_never_an_event() -> None:
    store = await ledger_with(1)
    stream, _ = open_stream(store, Signals(), heartbeat_s=0.05)
    assert [f["id"] for f in await take(stream, 1)] == ["1"]
    await say(store, 1)  # nobody announces it
    assert [f["id"] for f in await take(stream, 1)] == ["2"]
    await stream.aclose()


async def test_partials_pass_until_their_answer_is_sent_and_carry_no_id() -> None:
    store = await ledger_with(0)
    signals = Signals()
    stream, _ = open_stream(store, signals)
    first = asyncio.ensure_future(take(stream, 1))

    async def subscribed() -> bool:
        return bool(signals.subscriptions)

    await wait_until(subscribed, 5, "the stream to subscribe", interval_s=0.001)
    signals.offer(Partial({"generationId": "g1-1", "index": 0, "delta": "he"}))
    (partial,) = await first
    assert (partial["event"], "id" in partial) == ("partial", False)
    answered = {"kind": "assistant.message", "payload": {"generationId": "g1-1"}}
    signals.offer(Frame(1, "assistant.message", answered))
    signals.offer(Partial({"generationId": "g1-1", "index": 1, "delta": "llo"}))
    signals.offer(Partial({"generationId": "g1-2", "index": 0, "delta": "next"}))
    frames = await take(stream, 2)
    assert [(f["event"], f.get("id")) for f in frames] == [
        ("assistant.message", "1"),
        ("partial", None),
    ]
    assert "next" in frames[1]["data"], "the trailing g1-1 partial was dropped"
    await stream.aclose()


async def test_drain_sends_what_is_unread_then_the_drain_frame() -> None:
    store = await ledger_with(1)
    stream, draining = open_stream(store, Signals())
    assert [f["id"] for f in await take(stream, 1)] == ["1"]
    await say(store, 1)
    draining.set()
    frames = await take(stream, 2)
    assert [(f["event"], f.get("id")) for f in frames] == [("user.message", "2"), ("drain", None)]
