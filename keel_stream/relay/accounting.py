"""What the relay counts and reports as it goes: acknowledged rows, the backlog, claim checks."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from structlog.stdlib import BoundLogger

from keel_stream.relay import metrics
from keel_stream.relay.publisher import PublishResult
from keel_stream.store.outbox import OutboxRow, ShardConnection

__all__ = ["acknowledged_rows", "claim_checked", "measure_backlog"]


def acknowledged_rows(rows: Sequence[OutboxRow], result: PublishResult) -> list[OutboxRow]:
    """The rows of a batch the broker acknowledged (the first `result.acked`), counted."""
    acked = list(rows[: result.acked])
    if acked:
        now = time.time()
        for row in acked:
            metrics.PUBLISH_LATENCY.observe(max(0.0, now - row.committed_at.timestamp()))
        metrics.PUBLISHED.inc(len(acked))
    return acked


async def measure_backlog(shard: ShardConnection) -> None:
    backlog = await shard.backlog()
    metrics.BACKLOG.set(backlog.events)
    metrics.OLDEST_AGE.set(backlog.oldest_s)


def claim_checked(log: BoundLogger, row: OutboxRow, details: Mapping[str, Any]) -> None:
    metrics.CLAIM_CHECKED.inc()
    log.warning(
        "published a claim check in place of a refused event",
        tenant=row.tenant,
        session=row.session,
        seq=row.seq,
        **details,
    )
