"""Wall-clock time, as one replaceable function (tests move it forward a day)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

__all__ = ["Clock", "iso", "utc_now"]

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def iso(moment: datetime) -> str:
    """RFC 3339 in UTC with a Z."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")
