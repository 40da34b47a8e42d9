"""Nominal times of schedules: cron in an IANA zone across both DST changes, every, bounds,
jitter (docs/triggers.md, "Time zones and DST days")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from keel_stream.errors import InvalidTrigger
from keel_stream.triggers.schedule import Schedule, fire_key, jitter_of, parse_every

NEW_YORK = "America/New_York"


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)


def series(schedule: Schedule, after: datetime, count: int) -> list[datetime]:
    found: list[datetime] = []
    current = after
    for _ in range(count):
        nxt = schedule.next_after(current)
        assert nxt is not None
        found.append(nxt)
        current = nxt
    return found


def test_a_daily_time_in_the_spring_gap_fires_once_shifted_forward_by_the_gap() -> None:
    # 2026-03-08: New York's clocks jump from 02:00 EST to 03:00 EDT; 02:30 does not exist.
    daily = Schedule(cron="30 2 * * *", timezone=NEW_YORK)
    assert series(daily, utc(2026, 3, 7, 12), 3) == [
        utc(2026, 3, 8, 7, 30),  # 02:30 read with EST (-5): 03:30 EDT
        utc(2026, 3, 9, 6, 30),  # 02:30 EDT
        utc(2026, 3, 10, 6, 30),
    ]


def test_an_hourly_match_in_the_spring_gap_is_not_fired_twice() -> None:
    hourly = Schedule(cron="30 * * * *", timezone=NEW_YORK)
    assert series(hourly, utc(2026, 3, 8, 6), 3) == [
        utc(2026, 3, 8, 6, 30),  # 01:30 EST
        utc(2026, 3, 8, 7, 30),  # 02:30 (nonexistent) and 03:30 EDT are one instant: once
        utc(2026, 3, 8, 8, 30),  # 04:30 EDT
    ]


def test_a_repeated_local_time_in_the_autumn_fold_fires_once_at_its_first_occurrence() -> None:
    # 2026-11-01: clocks fall back from 02:00 EDT to 01:00 EST; 01:30 happens twice.
    daily = Schedule(cron="30 1 * * *", timezone=NEW_YORK)
    assert series(daily, utc(2026, 10, 31, 12), 2) == [
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT, the first occurrence
        utc(2026, 11, 2, 6, 30),  # the next day's 01:30 EST; the second 01:30 never fired
    ]
    hourly = Schedule(cron="30 * * * *", timezone=NEW_YORK)
    assert series(hourly, utc(2026, 11, 1, 4), 3) == [
        utc(2026, 11, 1, 4, 30),  # 00:30 EDT
        utc(2026, 11, 1, 5, 30),  # 01:30 EDT; 01:30 EST (06:30Z) is skipped
        utc(2026, 11, 1, 7, 30),  # 02:30 EST
    ]
    # From inside the repeated hour, the wall time already fired is not fired again.
    assert hourly.next_after(utc(2026, 11, 1, 6)) == utc(2026, 11, 1, 7, 30)


def test_every_is_utc_arithmetic_aligned_on_start_or_the_epoch() -> None:
    every = Schedule(every_s=3600, timezone=NEW_YORK)
    assert series(every, utc(2026, 3, 8, 5, 59), 3) == [
        utc(2026, 3, 8, 6),
        utc(2026, 3, 8, 7),
        utc(2026, 3, 8, 8),
    ]
    anchored = Schedule(every_s=90, start_at=utc(2026, 1, 1, 0, 0, 10))
    assert anchored.next_after(utc(2025, 1, 1)) == utc(2026, 1, 1, 0, 0, 10)
    assert anchored.next_after(utc(2026, 1, 1, 0, 0, 10)) == utc(2026, 1, 1, 0, 1, 40)


def test_end_at_bounds_the_nominal_times_and_counting_stops_at_its_cap() -> None:
    bounded = Schedule(every_s=1, end_at=utc(2026, 1, 1, 0, 0, 2))
    assert bounded.next_after(utc(2026, 1, 1, 0, 0, 1)) == utc(2026, 1, 1, 0, 0, 2)
    assert bounded.next_after(utc(2026, 1, 1, 0, 0, 2)) is None
    every = Schedule(every_s=1)
    assert every.count_through(utc(2026, 1, 1), utc(2026, 1, 1, 0, 0, 59)) == 60
    assert every.count_through(utc(2026, 1, 1), utc(2026, 1, 2), cap=100) == 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "* * * *"}, "five fields"),
        ({"cron": "61 * * * *"}, "five fields"),
        ({"cron": "* * * * * *"}, "five fields"),
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "IANA"),
        ({"cron": "* * * * *", "every_s": 60}, "exactly one"),
        ({}, "exactly one"),
        ({"every_s": 1, "start_at": utc(2026, 1, 2), "end_at": utc(2026, 1, 1)}, "endAt"),
    ],
)
def test_bad_schedules_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidTrigger, match=message):
        Schedule(**kwargs)  # type: ignore[arg-type]


def test_every_parses_units_and_refuses_the_rest() -> None:
    assert [parse_every(t) for t in ("1s", "90s", "5m", "2h", "1d")] == [1, 90, 300, 7200, 86400]
    for bad in ("0s", "1", "1w", "-1s", "1.5s", "367d"):
        with pytest.raises(InvalidTrigger):
            parse_every(bad)


def test_jitter_is_deterministic_and_within_its_bound() -> None:
    nominal = utc(2026, 5, 1, 12)
    delays = {jitter_of(f"tr_{n:016x}", nominal, 30) for n in range(200)}
    assert all(timedelta(0) <= d < timedelta(seconds=30) for d in delays)
    assert len(delays) > 100, "spread over the window"
    assert jitter_of("tr_1", nominal, 30) == jitter_of("tr_1", nominal, 30)
    assert jitter_of("tr_1", nominal, 0) == timedelta(0)
    assert fire_key(nominal) == "2026-05-01T12:00:00.000Z"
