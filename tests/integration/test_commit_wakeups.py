"""The commit's NOTIFY wake-ups: one per created event, after the commit, never failing it."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

import keel_stream.store.postgres as postgres_module
from keel_stream.kernel import CommitRequest, Event
from keel_stream.store import PostgresLedger, connect, sqlfiles


def user(text: str, key: str) -> CommitRequest:
    return CommitRequest(
        tenant_id="acme", session_id="s1", kind="user.message", payload={"text": text}, key=key
    )


async def test_a_batch_wakes_once_per_created_event_in_seq_order(
    ledger: PostgresLedger, database_dsn: str, session: tuple[str, str]
) -> None:
    listener = await connect(database_dsn)
    woken: asyncio.Queue[str] = asyncio.Queue()
    await listener.add_listener("keel_commits", lambda *args: woken.put_nowait(args[3]))
    try:
        await ledger.commit(user("one", "r1"))
        await ledger.commit_many([user("two", "r2"), user("one", "r1"), user("three", "r3")])
        await ledger.commit_many([user("one", "r1")])  # only a retry: no wake-up
        await ledger.commit(user("four", "r4"))
        heard = [await asyncio.wait_for(woken.get(), timeout=5) for _ in range(4)]
        assert heard == ["acme/s1/1", "acme/s1/2", "acme/s1/3", "acme/s1/4"]
        assert woken.empty()
    finally:
        await listener.close()


async def test_a_woken_listener_reads_the_event(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    listener = await connect(database_dsn)
    reads: asyncio.Queue[list[Event]] = asyncio.Queue()

    def woken(*args: object) -> None:
        seq = int(str(args[3]).rsplit("/", 1)[1])
        task = asyncio.ensure_future(ledger.read_events("acme", "s1", after=seq - 1, limit=1))
        task.add_done_callback(lambda done: reads.put_nowait(done.result()))

    await listener.add_listener("keel_commits", woken)
    try:
        for n in range(5):
            await ledger.commit(user(f"m{n}", f"r{n}"))
        read = [await asyncio.wait_for(reads.get(), timeout=5) for _ in range(5)]
        assert sorted((e.seq, e.payload["text"]) for (e,) in read) == [
            (n + 1, f"m{n}") for n in range(5)
        ], "each wake-up's event was readable when it arrived"
    finally:
        await listener.close()


async def test_a_lost_wake_up_leaves_the_commit_standing(
    ledger: PostgresLedger, session: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_query = sqlfiles.query

    def broken(name: str) -> str:
        return (
            "SELECT pg_notify('keel_commits', $1::text[]::text) FROM missing_table"
            if (name == "notify_commits")
            else real_query(name)
        )

    monkeypatch.setattr(postgres_module, "query", broken)
    submission = await ledger.commit(user("one", "r1"))
    assert (submission.created, submission.seq) == (True, 1)
    (event,) = await ledger.read_events("acme", "s1")
    assert event.payload["text"] == "one"
