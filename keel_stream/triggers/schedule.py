"""When a schedule fires (pure): nominal times, jitter, catch-up (docs/triggers.md).

A cron expression is matched against the *local wall clock* of the schedule's IANA zone
(croniter on naive datetimes), and each match is turned into an instant with `fold=0`:

- a wall time that does not exist (the spring gap) is read with the offset in force before
  the change, so 02:30 on a day whose clocks jump from 02:00 to 03:00 fires at 03:30 new time;
  if that instant is also a match of its own (an hourly `30 * * * *`), it fires once;
- a wall time that happens twice (the autumn fold) fires once, at its first occurrence.

Nominal times are strictly increasing instants; `every` schedules are plain UTC arithmetic
(aligned on startAt, else on the Unix epoch) and never see a time zone change.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter  # type: ignore[import-untyped]

from keel_stream.errors import InvalidTrigger

__all__ = ["EPOCH", "Schedule", "fire_key", "jitter_of", "parse_every"]

EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_EVERY: Final = re.compile(r"^([1-9][0-9]{0,8})(s|m|h|d)$")
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_MAX_EVERY_S: Final = 366 * 86400
_CRON_MAX: Final = 200
_CRON_FIELD: Final = re.compile(r"^[0-9*,/\-A-Za-z]+$")
_MAX_STEPS: Final = 10_000
"""Matches examined to find one instant past a given one (a fold or gap costs one or two)."""


def parse_every(text: str) -> int:
    """`90s`, `5m`, `2h`, `1d` as whole seconds; InvalidTrigger otherwise."""
    match = _EVERY.fullmatch(text)
    if match is None:
        raise InvalidTrigger(f"every {text!r}: a whole number and a unit s, m, h or d (e.g. 30s)")
    seconds = int(match[1]) * _UNITS[match[2]]
    if seconds > _MAX_EVERY_S:
        raise InvalidTrigger(f"every {text!r}: at most 366 days")
    return seconds


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InvalidTrigger(f"timezone {name!r} is not an IANA time zone") from exc


def _check_cron(expr: str) -> str:
    fields = expr.split()
    if (
        len(expr) > _CRON_MAX
        or len(fields) != 5
        or not all(_CRON_FIELD.fullmatch(f) for f in fields)
        or not croniter.is_valid(" ".join(fields))
    ):
        raise InvalidTrigger(f"cron {expr!r}: five fields (minute hour day month weekday)")
    return " ".join(fields)


@dataclass(frozen=True, slots=True)
class Schedule:
    """One of cron (with timezone) or every_s; start_at and end_at bound the nominal times."""

    cron: str | None = None
    every_s: int | None = None
    timezone: str = "UTC"
    start_at: datetime | None = None
    end_at: datetime | None = None

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every_s is None):
            raise InvalidTrigger("a schedule has exactly one of cron and every")
        if self.cron is not None:
            object.__setattr__(self, "cron", _check_cron(self.cron))
        _zone(self.timezone)
        if self.start_at and self.end_at and self.end_at <= self.start_at:
            raise InvalidTrigger("endAt must be after startAt")

    def next_after(self, instant: datetime) -> datetime | None:
        """The first nominal time strictly after `instant` (and at or after start_at), or None
        past end_at."""
        start = self.start_at
        if start is not None and instant < start:
            instant = start - timedelta(microseconds=1)
        try:
            found = (
                self._every_after(instant)
                if self.every_s is not None
                else self._cron_after(instant)
            )
        except OverflowError:
            return None  # past datetime's range: the schedule has no more nominal times
        if self.end_at is not None and found > self.end_at:
            return None
        return found

    def _every_after(self, instant: datetime) -> datetime:
        assert self.every_s is not None
        anchor = self.start_at or EPOCH
        step = timedelta(seconds=self.every_s)
        return anchor + ((instant - anchor) // step + 1) * step

    def _cron_after(self, instant: datetime) -> datetime:
        zone = _zone(self.timezone)
        wall = instant.astimezone(zone).replace(tzinfo=None)
        try:
            matches = croniter(self.cron, wall)
            for _ in range(_MAX_STEPS):
                local: datetime = matches.get_next(datetime)
                found = local.replace(tzinfo=zone, fold=0).astimezone(UTC)
                if found > instant:
                    return found
        except (ValueError, TypeError, KeyError) as exc:  # e.g. "0 0 31 2 *" never matches
            raise InvalidTrigger(f"cron {self.cron!r}: {exc}") from exc
        raise InvalidTrigger(f"cron {self.cron!r} has no match after {instant.isoformat()}")

    def count_through(self, first: datetime, last: datetime, cap: int = _MAX_STEPS) -> int:
        """How many nominal times lie in [first, last] (first being one), at most `cap`."""
        count, current = 0, first
        while count < cap and current <= last:
            count += 1
            nxt = self.next_after(current)
            if nxt is None:
                break
            current = nxt
        return count


def jitter_of(trigger_id: str, nominal: datetime, jitter_s: int) -> timedelta:
    """A deterministic delay in [0, jitter_s) from (trigger, nominal time): every replica and
    every retry computes the same actual time."""
    if jitter_s <= 0:
        return timedelta(0)
    digest = hashlib.sha256(f"{trigger_id}\0{iso(nominal)}".encode()).digest()
    return timedelta(milliseconds=int.from_bytes(digest[:8], "big") % (jitter_s * 1000))


def iso(instant: datetime) -> str:
    """A nominal time as it appears in keys and bodies: UTC, milliseconds, `Z`."""
    text = instant.astimezone(UTC).isoformat(timespec="milliseconds")
    return text.replace("+00:00", "Z")


def fire_key(nominal: datetime) -> str:
    """The per-trigger key of a scheduled firing: its nominal time."""
    return iso(nominal)
