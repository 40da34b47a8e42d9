"""The chaos benchmark, lean (`python -m benchmarks.chaos --smoke`): ten sessions of steady input
while every service is SIGKILLed a few times, the broker is stopped for 5 s and PostgreSQL
restarts once; nothing acknowledged is lost, duplicated or left unanswered, and
`keel-stream verify` finds ledger = topic = read models. The figures are read from the last line
of its stdout, as a user reads them (tests/integration/test_benchmarks_smoke.py runs the other
benchmarks so).

It starts servers of its own (the broker and PostgreSQL are stopped under it): Apache Kafka from
Maven where Java and Maven are installed, else the embedded broker (or with
KEEL_TEST_KAFKA=embedded). About a minute; `python -m benchmarks.chaos` is the full run.
"""

from __future__ import annotations

import os

import pytest

from benchmarks.chaos_cluster import SERVICES
from tests.support.benchmarks import run_benchmark

TIMEOUT_S = 280.0


@pytest.mark.timeout(TIMEOUT_S + 20)
def test_nothing_acknowledged_is_lost_duplicated_or_unanswered_under_chaos() -> None:
    embedded = os.environ.get("KEEL_TEST_KAFKA", "").strip().lower() == "embedded"
    kafka = ("--kafka", "embedded") if embedded else ()
    ran = run_benchmark("chaos", "--smoke", *kafka, env={}, timeout_s=TIMEOUT_S)
    said = ran.said()
    assert ran.returncode == 0, said
    figures = ran.figures()
    print(ran.stdout)
    assert figures["sessions_acknowledged_under_chaos"] == figures["sessions"], said
    assert figures["unacknowledged"] == 0, said
    assert figures["lost"] == 0, said
    assert figures["duplicated"] == 0, said
    assert figures["unanswered"] == 0, said
    assert all(figures["kills"][name] >= 2 for name in SERVICES), said
    assert figures["broker_stop"] is not None, said
    assert figures["postgres_restart"] is not None, said
    assert figures["services_up"], said
    assert figures["crashes_after_faults"] == 0, said
    assert figures["verify"] == "passed", said
