"""The cluster chaos run, lean (`python -m benchmarks.cluster_chaos --smoke`): the production
shape on this machine (three Kafka brokers with SASL/SCRAM, a pg_auto_failover primary and
synchronous standby, two API replicas behind HAProxy, two of every other service) under steady
input with SSE readers, one kill of each: a broker, the PostgreSQL primary, an API replica, a
worker, a projector, a relay. Nothing acknowledged is lost or duplicated, in the ledger or on
the topic; no SSE reader misses or repeats a seq; every input is answered; `keel-stream verify`
passes; every fault is recovered from. The figures are read from the last line of its stdout
and printed, with the engines' versions, into the suite's log.

It starts engines of its own (it kills them): Java and Maven for Kafka, Debian's
postgresql-15-auto-failover and haproxy (.ci/run installs them). A missing engine fails the
test with the reason; nothing runs in its place.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest

from benchmarks.cluster_faults import FAULTS
from tests.support.benchmarks import run_benchmark

TIMEOUT_S = 420.0


@pytest.mark.timeout(TIMEOUT_S + 20)
def test_one_kill_of_each_engine_loses_duplicates_and_skips_nothing(
    record_property: Callable[[str, object], None],
) -> None:
    ran = run_benchmark("cluster_chaos", "--smoke", env={}, timeout_s=TIMEOUT_S)
    said = ran.said()
    assert ran.returncode == 0, said
    figures = ran.figures()
    print(ran.stdout)
    record_property("summary", orjson.dumps(figures).decode())  # into CI's log
    assert [f["what"] for f in figures["faults"]] == list(FAULTS), said
    assert figures["acknowledged"] > 0, said
    for counted in ("unacknowledged", "lost", "duplicated", "unanswered"):
        assert figures[counted] == 0, (counted, said)
    assert figures["duplicated_on_topic"] == 0, said
    assert figures["missing_on_topic"] == 0, said
    assert figures["sse_gaps"] == 0, said
    assert figures["sse_duplicates"] == 0, said
    assert figures["verify"] == "passed", said
    for fault in figures["faults"]:
        assert all(s is not None for s in fault["recovery_s"].values()), (fault, said)
    assert figures["failover_write_gap_s"], said
    assert figures["throughput"]["ratio"] is not None, said
