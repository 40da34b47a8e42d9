"""Re-seeding keel.events.v1 from the ledger, for a broker that lost data.

Republishing puts the events back into the outbox (session by session, under each session's
row lock, so their outbox ids follow seq) and the relay publishes them as usual. Consumers
de-duplicate by (tenant, session, seq), so republishing what the topic still holds is harmless.
"""

from __future__ import annotations

from dataclasses import dataclass

import asyncpg

from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query

__all__ = ["RepublishReport", "republish"]


@dataclass(frozen=True, slots=True)
class RepublishReport:
    sessions: int
    events: int


async def republish(
    pool: asyncpg.Pool,
    *,
    tenant: str | None = None,
    session: str | None = None,
    after_seq: int = 0,
) -> RepublishReport:
    """Enqueue the ledger's events (all, a tenant's, or one session's) with seq > after_seq."""
    async with translated("republish"):
        targets = await pool.fetch(query("republish_sessions"), tenant, session)
        events = 0
        for target in targets:
            async with pool.acquire() as conn, conn.transaction():
                events += await conn.fetchval(
                    query("republish_session"), target["tenant_id"], target["session_id"], after_seq
                )
    return RepublishReport(sessions=len(targets), events=events)
