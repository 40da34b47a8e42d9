"""What an attempt's outcome means, and when the next attempt is due.

The schedule is Standard Webhooks' (after the first attempt: 5 s, 5 min, 30 min, 2 h, 5 h,
10 h, 14 h, 20 h, 24 h), scaled by `base_s / 5` and capped at `max_delay_s`, with ±20 % jitter.
A `Retry-After` (seconds or an HTTP date) is honoured as the earliest next attempt, capped at
`max_delay_s` too. Only 2xx is success; 410 Gone disables the endpoint; any other 4xx but 408
and 429 is final after the first attempt (it would fail the same way again); after
`max_attempts` attempts a delivery is dead.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Final

__all__ = ["RetryPolicy", "Verdict", "parse_retry_after", "verdict_of"]

SCHEDULE_S: Final = (5, 300, 1800, 7200, 18000, 36000, 50400, 72000, 86400)
_SCHEDULE_BASE_S: Final = 5.0
_RETRIABLE_4XX: Final = frozenset({408, 429})


class Verdict(StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    DEAD = "dead"
    GONE = "gone"
    """410: the endpoint is disabled."""


def verdict_of(status: int | None) -> Verdict:
    """What an HTTP status (None: no response, a timeout or a connection failure) means."""
    if status is None:
        return Verdict.RETRY
    if 200 <= status < 300:
        return Verdict.DELIVERED
    if status == 410:
        return Verdict.GONE
    if 400 <= status < 500 and status not in _RETRIABLE_4XX:
        return Verdict.DEAD
    return Verdict.RETRY


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or an HTTP date); None when
    absent or unparseable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    base_s: float = _SCHEDULE_BASE_S
    """The first retry's delay; the rest of the schedule scales with it."""
    max_delay_s: float = 86_400.0
    max_attempts: int = 10

    def delay_after(
        self, attempts: int, retry_after_s: float | None = None, rng: random.Random | None = None
    ) -> float:
        """Seconds from now to the next attempt, after `attempts` failed ones (>= 1)."""
        step = SCHEDULE_S[min(max(attempts, 1), len(SCHEDULE_S)) - 1]
        delay = step * self.base_s / _SCHEDULE_BASE_S
        delay *= (rng or random).uniform(0.8, 1.2)
        if retry_after_s is not None:
            delay = max(delay, retry_after_s)
        return min(delay, self.max_delay_s)

    def exhausted(self, attempts: int) -> bool:
        return attempts >= self.max_attempts
