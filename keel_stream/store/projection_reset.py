"""Forgetting stored projection offsets that point into a topic that is gone.

The read models and their source offsets live in PostgreSQL and survive a broker that does not
(the embedded broker is memory-only; a cluster may be rebuilt). Offsets into an earlier
incarnation of a topic would resume a processor at positions the new topic does not have (or
has with other records). Resetting them makes it start over at offset zero; the states stay,
and the processor drops by (tenant, session, seq) whatever they already include.
"""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from keel_stream.store.driver_errors import translated
from keel_stream.store.sqlfiles import query

__all__ = ["reset_offsets"]


async def reset_offsets(pool: asyncpg.Pool, topics: Sequence[str]) -> int:
    """Delete the stored offsets of these topics for every projection and generation; return
    how many partition offsets were forgotten. Run it while no processor of them runs."""
    async with translated("reset projection offsets"):
        count = await pool.fetchval(query("projection_reset_offsets"), list(topics))
    return int(count)
