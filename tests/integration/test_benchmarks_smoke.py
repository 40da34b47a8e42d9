"""Every benchmark still runs: each runnable module of benchmarks/ (found in the directory, see
tests/support/benchmarks.py), at its smallest size (`--smoke`), against the suite's PostgreSQL
and Kafka, ends with its figures (one JSON object) as its last line of stdout. A new benchmark
without `--smoke` fails here. Seconds each; the figures mean nothing at that size.

benchmarks.chaos and benchmarks.cluster_chaos kill their own servers, so they cannot share the
suite's: tests/integration/test_chaos.py and test_cluster_chaos.py run them (`--smoke`) and check
their figures' last line there.
"""

from __future__ import annotations

import pytest

from tests.support.benchmarks import (
    ROOT,
    SUPPORT,
    run_benchmark,
    runnable_benchmarks,
    started_by,
)
from tests.support.kafka import KafkaServer
from tests.support.postgres import PgServer

ELSEWHERE = {
    "chaos": "tests/integration/test_chaos.py",
    "cluster_chaos": "tests/integration/test_cluster_chaos.py",
}
"""Benchmarks run by another test (with `--smoke`), and where."""

SMOKE_TIMEOUT_S = 150.0


def test_the_benchmarks_are_found_and_support_modules_are_started_by_one() -> None:
    found = runnable_benchmarks()
    assert "scale" in found, found
    for name, test in ELSEWHERE.items():
        assert name in found, (name, found)
        assert f'run_benchmark("{name}", "--smoke"' in (ROOT / test).read_text(), test
    for support, benchmark in SUPPORT.items():
        assert benchmark in found, (support, found)
        assert started_by(benchmark, support), f"benchmarks.{benchmark} does not start {support}"


@pytest.mark.timeout(SMOKE_TIMEOUT_S + 30)
@pytest.mark.parametrize("name", [n for n in runnable_benchmarks() if n not in ELSEWHERE])
def test_every_benchmark_runs_at_its_smoke_size_and_ends_with_its_json_figures(
    name: str, pg_server: PgServer, kafka: KafkaServer
) -> None:
    ran = run_benchmark(
        name,
        "--smoke",
        env={"KEEL_DATABASE_URL": pg_server.admin_dsn, "KEEL_KAFKA_BOOTSTRAP": kafka.bootstrap},
        timeout_s=SMOKE_TIMEOUT_S,
    )
    assert ran.returncode == 0, ran.said()
    ran.figures()
    print(f"benchmarks.{name} --smoke: {ran.took_s:.1f} s")
