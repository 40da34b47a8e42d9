"""Reading the log, the commit's side effects (outbox, NOTIFY) and the guide degrade."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from keel_stream.errors import InvalidPage
from keel_stream.kernel import CommitRequest, LeaseToken
from keel_stream.store import PostgresLedger, connect
from tests.support.ledger import grant_lease


def user(payload: dict[str, Any], key: str | None = None) -> CommitRequest:
    return CommitRequest(
        tenant_id="acme", session_id="s1", kind="user.message", payload=payload, key=key
    )


async def test_events_after_a_seq_with_a_limit(
    ledger: PostgresLedger, session: tuple[str, str]
) -> None:
    for i in range(7):
        await ledger.commit(user({"text": str(i)}))
    page = await ledger.read_events("acme", "s1", after=2, limit=3)
    assert [e.seq for e in page] == [3, 4, 5]
    assert [e.payload["text"] for e in page] == ["2", "3", "4"]
    assert all(e.tenant == "acme" and e.session == "s1" for e in page)
    assert [e.seq for e in await ledger.read_events("acme", "s1", after=5)] == [6, 7]
    assert await ledger.read_events("acme", "s1", after=7) == []


@pytest.mark.parametrize(("after", "limit"), [(-1, 10), (0, 0), (0, 1001)])
async def test_out_of_range_pages_are_refused(
    ledger: PostgresLedger, session: tuple[str, str], after: int, limit: int
) -> None:
    with pytest.raises(InvalidPage):
        await ledger.read_events("acme", "s1", after=after, limit=limit)


async def test_payload_is_stored_as_given_with_its_key(
    ledger: PostgresLedger, session: tuple[str, str]
) -> None:
    payload = {"text": "hello keel", "meta": {"client": "cli", "n": [1, 2.5, None]}}
    await ledger.commit(user(payload, key="9e5088a0"))
    (event,) = await ledger.read_events("acme", "s1")
    assert event.kind == "user.message"
    assert event.payload == {**payload, "requestId": "9e5088a0"}


async def test_commit_notifies_listeners_on_commit(
    ledger: PostgresLedger, database_dsn: str, session: tuple[str, str]
) -> None:
    listener = await connect(database_dsn)
    received: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("keel_commits", lambda *args: received.put_nowait(args[3]))
    try:
        await ledger.commit(user({"text": "x"}))
        assert await asyncio.wait_for(received.get(), timeout=5) == "acme/s1/1"
    finally:
        await listener.close()


async def test_guide_without_active_attempt_is_written_as_queue(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    await ledger.commit(user({"text": "a", "delivery": "guide"}, key="g1"))
    await grant_lease(pool, "acme", "s1", LeaseToken(owner="w1", epoch=1), running=True)
    await ledger.commit(user({"text": "b", "delivery": "guide"}, key="g2"))
    await ledger.commit(user({"text": "c"}, key="q1"))
    events = await ledger.read_events("acme", "s1")
    assert [e.payload.get("delivery") for e in events] == ["queue", "guide", None]


async def test_retry_of_a_degraded_guide_returns_the_original(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    first = await ledger.commit(user({"text": "a", "delivery": "guide"}, key="g1"))
    await grant_lease(pool, "acme", "s1", LeaseToken(owner="w1", epoch=1), running=True)
    again = await ledger.commit(user({"text": "a", "delivery": "guide"}, key="g1"))
    assert (again.created, again.seq) == (False, first.seq)
