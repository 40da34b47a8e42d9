"""The trigger scheduler's metrics (`keel_triggers_*`)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter

__all__ = ["CLAIMS", "DECISIONS", "OUTCOMES"]

CLAIMS: Final = Counter("keel_triggers_claims", "Triggers a scheduler claimed (each under a lease)")
DECISIONS: Final = Counter(
    "keel_triggers_decisions",
    "Firings recorded, by decision: fire, skip, buffer, cancel_other",
    ["decision"],
)
OUTCOMES: Final = Counter(
    "keel_triggers_outcomes",
    "Firing outcomes recorded, by outcome: committed, skipped, failed",
    ["outcome"],
)
