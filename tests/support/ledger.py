"""Helpers for integration tests that set up ledger state directly."""

from __future__ import annotations

import asyncpg

from keel_stream.kernel import LeaseToken


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
