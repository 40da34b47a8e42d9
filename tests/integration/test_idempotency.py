"""One key, one scope: retries, conflicts, and independence across sessions."""

from __future__ import annotations

import asyncpg
import pytest

from keel_stream.errors import IdempotencyConflict
from keel_stream.kernel import CommitRequest, LeaseToken
from keel_stream.store import PostgresLedger
from tests.support.ledger import counts, grant_lease


def user(sid: str, text: str, key: str | None = "r1", **payload: object) -> CommitRequest:
    return CommitRequest(
        tenant_id="acme",
        session_id=sid,
        kind="user.message",
        payload={"text": text, **payload},
        key=key,
    )


async def test_retry_returns_the_original_submission(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    first = await ledger.commit(user("s1", "hi"))
    again = await ledger.commit(user("s1", "hi"))
    assert (first.created, again.created) == (True, False)
    assert (again.seq, again.key, again.committed_at) == (first.seq, "r1", first.committed_at)
    assert await counts(pool) == (1, 1)


async def test_same_key_other_payload_is_a_conflict_and_writes_nothing(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    await ledger.commit(user("s1", "hi"))
    with pytest.raises(IdempotencyConflict) as info:
        await ledger.commit(user("s1", "hello"))
    assert info.value.code == "idempotency_conflict"
    assert await counts(pool) == (1, 1)
    events = await ledger.read_events("acme", "s1")
    assert [e.payload["text"] for e in events] == ["hi"]


async def test_same_key_in_another_session_is_independent(
    ledger: PostgresLedger, session: tuple[str, str]
) -> None:
    await ledger.create_session("acme", "s2")
    await ledger.commit(user("s1", "one"))
    await ledger.commit(user("s1", "two", key="r2"))
    other = await ledger.commit(user("s2", "other"))
    assert other.created
    assert other.seq == 1
    assert [e.payload["text"] for e in await ledger.read_events("acme", "s2")] == ["other"]


async def test_key_namespaces_do_not_collide(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    lease = LeaseToken(owner="w1", epoch=1)
    await grant_lease(pool, "acme", "s1", lease)
    call = {"type": "toolCall", "id": "x", "name": "echo", "arguments": {}}
    await ledger.commit(
        CommitRequest(
            tenant_id="acme",
            session_id="s1",
            kind="assistant.message",
            payload={"content": [call], "stopReason": "tool_use"},
            key="x",
            lease=lease,
        )
    )
    result = await ledger.commit(
        CommitRequest(
            tenant_id="acme",
            session_id="s1",
            kind="tool.result",
            payload={"toolCallId": "x", "content": []},
            lease=lease,
        )
    )
    assert (result.created, result.seq) == (True, 2)


async def test_tool_result_is_exactly_once_per_call(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    lease = LeaseToken(owner="w1", epoch=1)
    await grant_lease(pool, "acme", "s1", lease)
    call = {"type": "toolCall", "id": "c1", "name": "echo", "arguments": {}}
    await ledger.commit(
        CommitRequest(
            tenant_id="acme",
            session_id="s1",
            kind="assistant.message",
            payload={"content": [call]},
            key="g1",
            lease=lease,
        )
    )
    result = CommitRequest(
        tenant_id="acme",
        session_id="s1",
        kind="tool.result",
        payload={"toolCallId": "c1", "content": [{"type": "text", "text": "ok"}]},
        lease=lease,
    )
    first = await ledger.commit(result)
    rerun = await ledger.commit(result)
    assert (first.created, rerun.created, rerun.seq) == (True, False, first.seq)
    assert await counts(pool) == (2, 2)
