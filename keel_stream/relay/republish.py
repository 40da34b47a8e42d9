"""Re-seeding keel.events.v1 from the ledger, for a broker that lost data.

Republishing puts the events back into the outbox (session by session, under each session's
row lock, so their outbox ids follow seq) and the relay publishes them as usual. Consumers
de-duplicate by (tenant, session, seq), so republishing what the topic still holds is harmless.
"""

from __future__ import annotations

from keel_stream.store.connect import Pool
from keel_stream.store.outbox import PostgresOutbox, RepublishReport

__all__ = ["RepublishReport", "republish"]


async def republish(
    pool: Pool,
    *,
    tenant: str | None = None,
    session: str | None = None,
    after_seq: int = 0,
) -> RepublishReport:
    """Enqueue the ledger's events (all, a tenant's, or one session's) with seq > after_seq.

    For a caller that holds a pool; one that holds an Outbox calls its `republish`."""
    return await PostgresOutbox(pool).republish(tenant=tenant, session=session, after_seq=after_seq)
