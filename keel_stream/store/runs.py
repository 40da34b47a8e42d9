"""The run rows on PostgreSQL: claims (with takeover), heartbeats, settling, release, cancel."""

from __future__ import annotations

from typing import Final

import asyncpg

from keel_stream.kernel.status import RunStatus
from keel_stream.kernel.types import LeaseToken
from keel_stream.store.driver_errors import translated
from keel_stream.store.protocol import NO_FAIRNESS, Claim, ClaimFairness, Heartbeat, Settlement
from keel_stream.store.sqlfiles import query

__all__ = ["CAPPED_CLAIM_LOCK_CLASS", "PostgresRuns"]

CAPPED_CLAIM_LOCK_CLASS: Final = 0x6B636C6D  # "kclm": serialises claims under a tenant cap


class PostgresRuns:
    """Implements keel_stream.store.protocol.Runs."""

    def __init__(self, pool: asyncpg.Pool, owner: str, lease_ttl_s: float) -> None:
        self._pool = pool
        self._owner = owner
        self._ttl = lease_ttl_s

    async def claim(self, fairness: ClaimFairness = NO_FAIRNESS) -> Claim | None:
        arguments = (self._owner, self._ttl, sorted(fairness.skip_tenants), fairness.tenant_cap)
        async with translated("claim run"):
            if fairness.tenant_cap == 0:
                row = await self._pool.fetchrow(query("claim_run"), *arguments)
            else:
                async with self._pool.acquire() as conn, conn.transaction():
                    await conn.execute(query("claim_capped_lock"), CAPPED_CLAIM_LOCK_CLASS)
                    row = await conn.fetchrow(query("claim_run"), *arguments)
        if row is None:
            return None
        return Claim(
            tenant=row["tenant_id"],
            session=row["session_id"],
            lease=LeaseToken(owner=self._owner, epoch=row["lease_epoch"]),
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            read_watermark=row["read_watermark"],
            taken_over=row["taken_over"],
            cancel_requested=row["cancel_requested"],
        )

    async def heartbeat(self, claim: Claim) -> Heartbeat:
        async with translated("heartbeat"):
            row = await self._pool.fetchrow(
                query("heartbeat_run"),
                claim.tenant,
                claim.session,
                claim.lease.owner,
                claim.lease.epoch,
                self._ttl,
            )
        if row is None:
            return Heartbeat(held=False, cancel_requested=False)
        return Heartbeat(held=True, cancel_requested=bool(row["cancel_requested"]))

    async def settle(self, claim: Claim, settlement: Settlement) -> RunStatus | None:
        """The run's status after settling; None if the lease was no longer held."""
        async with translated("settle run"):
            row = await self._pool.fetchrow(
                query("settle_run"),
                claim.tenant,
                claim.session,
                claim.lease.owner,
                claim.lease.epoch,
                settlement.status.value,
                settlement.read_watermark,
                settlement.accounted_through,
                settlement.fresh_budget,
                settlement.retry_after_s,
            )
        return None if row is None else RunStatus(row["status"])

    async def release(self, claim: Claim) -> bool:
        async with translated("release run"):
            row = await self._pool.fetchrow(
                query("release_run"),
                claim.tenant,
                claim.session,
                claim.lease.owner,
                claim.lease.epoch,
            )
        return row is not None

    async def request_cancel(self, tenant: str, session: str) -> bool:
        """Ask the owning worker to stop the running attempt; False if none is running."""
        async with translated("cancel run"):
            row = await self._pool.fetchrow(query("request_cancel"), tenant, session)
        return row is not None
