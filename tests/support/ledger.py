"""Helpers for integration tests that set up ledger state directly."""

from __future__ import annotations

import asyncio
import itertools

import asyncpg

from keel_stream.kernel import CommitRequest, LeaseToken
from keel_stream.store import PostgresLedger


async def grant_lease(
    pool: asyncpg.Pool, tenant: str, session: str, lease: LeaseToken, *, running: bool = True
) -> None:
    """Give a session's run to an owner at an epoch, as a claim would (the runtime comes later)."""
    await pool.execute(
        """
        INSERT INTO runs (tenant_id, session_id, status, lease_owner, lease_epoch,
                          lease_expires_at, attempts)
        VALUES ($1, $2, $3, $4, $5, now() + interval '30 seconds', 1)
        ON CONFLICT (tenant_id, session_id) DO UPDATE
        SET status = EXCLUDED.status, lease_owner = EXCLUDED.lease_owner,
            lease_epoch = EXCLUDED.lease_epoch, lease_expires_at = EXCLUDED.lease_expires_at
        """,
        tenant,
        session,
        "running" if running else "pending",
        lease.owner,
        lease.epoch,
    )


async def counts(pool: asyncpg.Pool) -> tuple[int, int]:
    """(events, outbox rows) in the whole database."""
    row = await pool.fetchrow(
        "SELECT (SELECT count(*) FROM events) AS events, (SELECT count(*) FROM outbox) AS outbox"
    )
    assert row is not None
    return int(row["events"]), int(row["outbox"])


async def commit_round_robin(
    ledger: PostgresLedger, sessions: list[str], total: int, writers: int = 10, start: int = 0
) -> None:
    """Commit `total` new user messages (numbered from `start`) over the sessions, concurrently."""
    counter = itertools.count(start)
    total += start

    async def writer() -> None:
        while (i := next(counter)) < total:
            await ledger.commit(
                CommitRequest(
                    tenant_id="acme",
                    session_id=sessions[i % len(sessions)],
                    kind="user.message",
                    payload={"text": f"event {i}"},
                    key=f"r{i}",
                )
            )

    await asyncio.gather(*(writer() for _ in range(writers)))


async def make_sessions(ledger: PostgresLedger, count: int) -> list[str]:
    await ledger.create_tenant("acme")
    return [await ledger.create_session("acme", f"s{i:02d}") for i in range(count)]


async def outbox_empty(pool: asyncpg.Pool) -> bool:
    return bool(await pool.fetchval("SELECT count(*) FROM outbox") == 0)


async def converse(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    session: str,
    cycles: int,
    start: int = 0,
    pace_s: float = 0.0,
) -> None:
    """Commit `cycles` agent turns in one session: input, tool call, result, answer, summary.

    pace_s spaces the turns out, for tests that must act while commits are still flowing.
    """
    lease = LeaseToken(owner="worker", epoch=1)
    await grant_lease(pool, "acme", session, lease)
    for n in range(start, start + cycles):
        user = await ledger.commit(
            CommitRequest(
                tenant_id="acme",
                session_id=session,
                kind="user.message",
                payload={"text": f"question {n}"},
                key=f"{session}-q{n}",
            )
        )
        call = {"type": "toolCall", "id": f"call-{n}", "name": "lookup", "arguments": {"n": n}}
        for request in (
            CommitRequest(
                tenant_id="acme",
                session_id=session,
                kind="assistant.message",
                payload={"content": [call], "inputSeqs": [user.seq], "stopReason": "tool_use"},
                key=f"{session}-g{n}a",
                lease=lease,
            ),
            CommitRequest(
                tenant_id="acme",
                session_id=session,
                kind="tool.result",
                payload={"toolCallId": f"call-{n}", "content": [{"type": "text", "text": "42"}]},
                lease=lease,
            ),
            CommitRequest(
                tenant_id="acme",
                session_id=session,
                kind="assistant.message",
                payload={
                    "content": [{"type": "text", "text": f"answer {n}"}],
                    "inputSeqs": [],
                    "stopReason": "end_turn",
                },
                key=f"{session}-g{n}b",
                lease=lease,
            ),
            CommitRequest(
                tenant_id="acme",
                session_id=session,
                kind="run.finished",
                payload={"status": "done", "turns": 2, "durationMs": n, "toolTimings": []},
                lease=lease,
            ),
        ):
            await ledger.commit(request)
        if pace_s:
            await asyncio.sleep(pace_s)


async def converse_all(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    sessions: list[str],
    cycles: int,
    start: int = 0,
    pace_s: float = 0.0,
) -> None:
    await asyncio.gather(*(converse(ledger, pool, s, cycles, start, pace_s) for s in sessions))
