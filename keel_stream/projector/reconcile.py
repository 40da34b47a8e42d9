"""Healing tails that never arrived: compare each idle session's ledger head with the models."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from keel_stream.projector.applier import Applier, BatchResult, live_generations
from keel_stream.projector.events import LedgerEvent
from keel_stream.store.sqlfiles import query
from projections.base import Projection

__all__ = ["reconcile"]


async def reconcile(
    conn: asyncpg.Connection,
    applier: Applier,
    projections: Sequence[Projection[Any]],
    *,
    idle_s: float = 2.0,
    limit: int = 500,
    owns: Callable[[str, str], bool] = lambda tenant, session: True,
) -> BatchResult:
    """Apply, from the ledger, what idle sessions miss in any live projection."""
    live = await live_generations(conn)
    behind: dict[tuple[str, str], int] = {}
    for projection in projections:
        rows = await conn.fetch(
            query("projection_behind"), projection.name, live[projection.name], idle_s, limit
        )
        for r in rows:
            key = (r["tenant_id"], r["session_id"])
            if owns(*key):
                behind[key] = min(behind.get(key, r["applied"]), r["applied"])
    events: list[LedgerEvent] = []
    for (tenant, session), applied in sorted(behind.items()):
        rows = await conn.fetch(query("ledger_range"), tenant, session, applied, 2**62)
        events.extend(LedgerEvent.from_row(tenant, session, r) for r in rows)
    if not events:
        return BatchResult(applied=0, gap_filled=0)
    return await applier.apply_events(conn, events)
