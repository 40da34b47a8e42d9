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
