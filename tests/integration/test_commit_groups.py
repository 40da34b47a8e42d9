"""Group commit: concurrent commits share keel_commit calls, and each stands or falls alone."""

from __future__ import annotations

import asyncio
import random

import asyncpg
import pytest

from keel_stream.errors import (
    IdempotencyConflict,
    KeelError,
    LeaseFenced,
    SessionNotFound,
    StoreError,
    StoreUnavailable,
)
from keel_stream.kernel import CommitRequest, LeaseToken, Submission
from keel_stream.kernel.commits import PreparedCommit
from keel_stream.store import PostgresLedger, connect
from tests.support.ledger import counts
from tests.support.wait import wait_until


class CountingLedger(PostgresLedger):
    """Counts keel_commit calls and the commits each carried."""

    def __init__(self, pool: asyncpg.Pool) -> None:
        super().__init__(pool)
        self.calls: list[int] = []

    async def _call(
        self, conn: asyncpg.Connection, commits: list[PreparedCommit], *, atomic: bool
    ) -> list[Submission | KeelError]:
        self.calls.append(len(commits))
        return await super()._call(conn, commits, atomic=atomic)


def user(session: str, text: str, key: str) -> CommitRequest:
    return CommitRequest(
        tenant_id="acme", session_id=session, kind="user.message", payload={"text": text}, key=key
    )


async def outcome(ledger: PostgresLedger, request: CommitRequest) -> Submission | KeelError:
    try:
        return await ledger.commit(request)
    except KeelError as exc:
        return exc


async def test_concurrent_commits_share_calls_and_a_refusal_stays_alone(
    pool: asyncpg.Pool,
) -> None:
    ledger = CountingLedger(pool)
    await ledger.create_tenant("acme")
    sessions = [await ledger.create_session("acme", f"s{i}") for i in range(8)]
    await ledger.commit(user("s0", "taken", "k"))
    requests = [user(s, f"m{i}", f"r{i}") for i, s in enumerate(sessions * 4)]
    requests[5] = user("s0", "other payload", "k")  # the key is taken: a conflict
    requests[9] = user("nope", "no such session", "x")
    requests[13] = CommitRequest(
        tenant_id="acme",
        session_id="s1",
        kind="run.finished",
        payload={"status": "done"},
        lease=LeaseToken(owner="nobody", epoch=1),
    )
    results = await asyncio.gather(*(outcome(ledger, r) for r in requests))
    assert isinstance(results[5], IdempotencyConflict)
    assert isinstance(results[9], SessionNotFound)
    assert isinstance(results[13], LeaseFenced)
    created = [r for r in results if isinstance(r, Submission)]
    assert len(created) == len(requests) - 3
    assert all(s.created for s in created)
    assert len(ledger.calls) < len(requests), "commits waiting for a call share the next one"
    assert max(ledger.calls) > 1
    for session in sessions:
        events = await ledger.read_events("acme", session)
        assert [e.seq for e in events] == list(range(1, len(events) + 1)), "dense"
    assert await counts(pool) == (1 + len(created), 1 + len(created))


async def test_groups_over_shared_sessions_never_deadlock(pool: asyncpg.Pool) -> None:
    """Three ledgers (three processes, say) make group calls over the same sessions at once."""
    ledgers = [PostgresLedger(pool) for _ in range(3)]
    await ledgers[0].create_tenant("acme")
    sessions = [await ledgers[0].create_session("acme", f"s{i}") for i in range(5)]
    rng = random.Random(7)

    async def writer(w: int) -> None:
        for n in range(15):
            request = user(rng.choice(sessions), f"{w}.{n}", f"r{w}.{n}")
            await ledgers[w % 3].commit(request)

    await asyncio.gather(*(writer(w) for w in range(30)))
    heads = [await ledgers[0].head("acme", s) for s in sessions]
    assert sum(heads) == 30 * 15
    for session, head in zip(sessions, heads, strict=True):
        events = await ledgers[0].read_events("acme", session, limit=1000)
        assert [e.seq for e in events] == list(range(1, head + 1))


async def test_a_group_call_the_server_failed_is_retried_one_by_one(
    pool: asyncpg.Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = CountingLedger(pool)
    await ledger.create_tenant("acme")
    sessions = [await ledger.create_session("acme", f"s{i}") for i in range(6)]
    real_call = CountingLedger._call
    failed: list[int] = []

    async def failing_groups(
        self: CountingLedger,
        conn: asyncpg.Connection,
        commits: list[PreparedCommit],
        *,
        atomic: bool,
    ) -> list[Submission | KeelError]:
        if len(commits) > 1 and not failed:
            failed.append(len(commits))
            raise StoreError("commit: the server failed the call")
        return await real_call(self, conn, commits, atomic=atomic)

    monkeypatch.setattr(CountingLedger, "_call", failing_groups)
    results = await asyncio.gather(
        *(ledger.commit(user(s, "hi", f"r{s}")) for s in sessions * 2), return_exceptions=True
    )
    assert failed, "a group call was made and failed"
    assert all(isinstance(r, Submission) for r in results), results
    assert [await ledger.head("acme", s) for s in sessions] == [1] * 6, "retries replayed"


async def test_a_commit_waiting_for_a_lock_does_not_hold_up_other_sessions(
    pool: asyncpg.Pool, database_dsn: str
) -> None:
    ledger = PostgresLedger(pool)
    await ledger.create_tenant("acme")
    for session in ("s0", "s1", "s2"):
        await ledger.create_session("acme", session)
    holder = await connect(database_dsn)
    try:
        locked = holder.transaction()
        await locked.start()
        await holder.execute("SELECT 1 FROM sessions WHERE session_id = 's0' FOR UPDATE")
        blocked = asyncio.ensure_future(ledger.commit(user("s0", "waits", "r0")))
        others = [ledger.commit(user(s, "goes", f"r{i}")) for i, s in enumerate(["s1", "s2", "s1"])]
        done = await asyncio.wait_for(asyncio.gather(*others), timeout=10)
        assert [s.seq for s in done] == [1, 1, 2]
        assert not blocked.done(), "the commit to the locked session still waits"
        await locked.rollback()
        assert (await asyncio.wait_for(blocked, timeout=10)).seq == 1
    finally:
        await holder.close()


async def test_callers_of_a_call_whose_connection_broke_are_told_it_is_unknown(
    pool: asyncpg.Pool, database_dsn: str
) -> None:
    ledger = PostgresLedger(pool)
    await ledger.create_tenant("acme")
    await ledger.create_session("acme", "s0")
    holder = await connect(database_dsn)
    try:
        locked = holder.transaction()
        await locked.start()
        await holder.execute("SELECT 1 FROM sessions WHERE session_id = 's0' FOR UPDATE")
        calls = [asyncio.ensure_future(ledger.commit(user("s0", "m", f"r{i}"))) for i in range(6)]

        async def blocked_on_the_lock() -> bool:
            # Not on the holder: in its transaction pg_stat_activity is a snapshot.
            waiting = await pool.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND datname = current_database()"
            )
            return bool(waiting >= 3)

        await wait_until(blocked_on_the_lock, 10, "three commit calls to wait for the lock")
        await holder.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        results = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), timeout=10)
        await locked.rollback()
    finally:
        await holder.close()
    assert all(isinstance(r, StoreUnavailable) for r in results), results
    assert (await ledger.commit(user("s0", "after", "later"))).created, "the pool recovers"
