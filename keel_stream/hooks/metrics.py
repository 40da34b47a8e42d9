"""The hooks process's metrics (`keel_hooks_*`)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge

__all__ = ["ATTEMPTS", "BACKLOG", "DISPATCHED", "GAP_FILLED"]

DISPATCHED: Final = Counter(
    "keel_hooks_dispatched", "Delivery rows the dispatcher wrote (duplicates included)"
)
GAP_FILLED: Final = Counter(
    "keel_hooks_gap_filled_events", "Events the dispatcher read from the ledger to fill gaps"
)
ATTEMPTS: Final = Counter(
    "keel_hooks_attempts",
    "Delivery attempts by outcome: delivered, failed (a retry is due), dead (dead-lettered), "
    "gone (410: the endpoint was disabled), refused (the URL resolved to a refused address)",
    ["outcome"],
)
BACKLOG: Final = Gauge(
    "keel_hooks_backlog", "Deliveries due now to active subscriptions (refreshed by senders)"
)
