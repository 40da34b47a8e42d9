"""Relay benchmark: commit-to-topic latency at a steady rate, and the relay's peak throughput.

    python -m benchmarks.relay [--rate 500] [--seconds 10] [--backlog 50000] [--soak]
                               [--profile relay-profile.txt] [--smoke]

Baseline, in the same run: a bare aiokafka producer sending the same records (same keys, values
and headers) to the same broker. The relay runs as its own process (`keel-stream relay`), so its
peak RSS is its own. `--soak` runs the steady phase ten times longer and prints the relay's peak
RSS after the first tenth and at the end (flat: no growth with time). `--profile` runs the relay
of the peak phase under pyinstrument and writes its text report there (that run's throughput is
the profiler's, not a figure). The broker: benchmarks/servers.py (Apache Kafka where Java and
Maven exist). Last line: one JSON object with the figures, the load average, and
`ratio_vs_producer`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Final

import asyncpg
import orjson

from benchmarks.cli import arguments
from benchmarks.relay_measure import (
    SESSIONS,
    assigned_consumer,
    bare_producer,
    fresh_topic,
    load_average,
    peak_rss_mb,
    percentile,
    producer_latency,
    producer_peak,
    receive_latencies,
    warm_broker,
    warm_producer,
    warm_up_sessions,
)
from benchmarks.servers import kafka, postgres, scratch_database
from keel_stream.kernel import CommitRequest
from keel_stream.store import PostgresLedger, create_pool
from keel_stream.topics.catalog import EVENTS


async def start_relay(
    dsn: str, bootstrap: str, prefix: str, profile: Path | None = None
) -> asyncio.subprocess.Process:
    env = {**os.environ, "KEEL_TOPIC_PREFIX": prefix, "KEEL_LOG_LEVEL": "warning"}
    profiler = [] if profile is None else ["-m", "pyinstrument", "-r", "text", "-o", str(profile)]
    return await asyncio.create_subprocess_exec(
        sys.executable, *profiler, "-m", "keel_stream", "relay", "--database-url", dsn,
        "--bootstrap", bootstrap, env=env, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


async def stop(process: asyncio.subprocess.Process) -> None:
    process.send_signal(signal.SIGTERM)
    await asyncio.wait_for(process.wait(), 30)


async def steady_latency(
    ledger: PostgresLedger, bootstrap: str, topic: str, rate: int, seconds: float, relay_pid: int
) -> tuple[list[float], list[float], float]:
    """Commit at `rate` for `seconds`: the commit-to-topic latencies (from committedAt, and from
    the commit call's return), and the relay's peak RSS after the first tenth of the run."""
    total = int(rate * seconds)
    consumer = await assigned_consumer(bootstrap, topic)
    returned: dict[tuple[str, int], float] = {}
    after_return: list[float] = []
    receiving = asyncio.create_task(
        receive_latencies(consumer, total, seconds + 60, returned, after_return)
    )
    started = time.monotonic()
    early_rss = 0.0
    for i in range(total):
        delay = started + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if i == total // 10:
            early_rss = peak_rss_mb(relay_pid)
        session = f"s{i % SESSIONS}"
        submission = await ledger.commit(
            CommitRequest(
                tenant_id="bench",
                session_id=session,
                kind="user.message",
                payload={"text": f"steady {i}"},
            )
        )
        returned[(session, submission.seq)] = time.time()
    latencies = await receiving
    await consumer.stop()
    return latencies, after_return, early_rss


async def warm_up(ledger: PostgresLedger, pool: asyncpg.Pool) -> None:
    """Measure a running relay, not its start: an event committed and published in every
    partition first (a partition's first write costs the broker more)."""
    for session in warm_up_sessions("bench"):
        await ledger.commit(
            CommitRequest(
                tenant_id="bench", session_id=session, kind="user.message", payload={"text": "w"}
            )
        )
    deadline = time.monotonic() + 60
    while await pool.fetchval("SELECT count(*) FROM outbox") > 0:
        if time.monotonic() > deadline:
            raise TimeoutError("the relay never published the warm-up event")
        await asyncio.sleep(0.05)


async def fill_backlog(pool: asyncpg.Pool, events: int) -> None:
    """Bulk-load events and their outbox rows (bypassing the kernel: this measures the relay)."""
    per_session = events // SESSIONS
    await pool.execute(
        """
        WITH rows AS (
            SELECT 'bench' AS t, 's' || s AS sess, s.last_seq + n AS seq
            FROM generate_series(0, $1 - 1) AS g(s)
            JOIN sessions AS s ON s.tenant_id = 'bench' AND s.session_id = 's' || g.s
            CROSS JOIN generate_series(1, $2) AS n
        ), ins AS (
            INSERT INTO events (tenant_id, session_id, seq, kind, payload, request_digest)
            SELECT t, sess, seq, 'user.message', jsonb_build_object('text', 'backlog ' || seq), ''
            FROM rows ORDER BY sess, seq
            RETURNING tenant_id, session_id, seq
        )
        INSERT INTO outbox (tenant_id, session_id, seq)
        SELECT tenant_id, session_id, seq FROM ins ORDER BY session_id, seq
        """,
        SESSIONS,
        per_session,
    )
    await pool.execute(
        "UPDATE sessions SET last_seq = last_seq + $1 WHERE tenant_id = 'bench'", per_session
    )


async def relay_throughput(
    pool: asyncpg.Pool, dsn: str, bootstrap: str, prefix: str, n: int, profile: Path | None
) -> tuple[float, float, float]:
    """Drain a backlog of n events: events per second while draining (from the first poll that
    finds rows gone to the poll that finds none; as the bare producer's figure, it leaves out
    starting up), events per second from the relay process's start (interpreter, connections,
    catalog, tail read), and the draining relay's peak RSS."""
    await fill_backlog(pool, n)
    started = time.monotonic()
    relay = await start_relay(dsn, bootstrap, prefix, profile)
    first: tuple[float, int] | None = None
    while (left := await pool.fetchval("SELECT count(*) FROM outbox")) > 0:
        if first is None and left < n:
            first = (time.monotonic(), left)
        await asyncio.sleep(0.05)
    ended = time.monotonic()
    rss = peak_rss_mb(relay.pid)
    await stop(relay)
    began, pending = first or (started, n)
    return pending / (ended - began), n / (ended - started), rss


async def steady(
    args: argparse.Namespace, bench_dsn: str, bootstrap: str, prefix: str
) -> dict[str, float]:
    """Commit-to-topic latency through the relay at the steady rate (and the relay's RSS), then
    the bare producer's send-to-arrival latency at the same rate."""
    seconds = args.seconds * (10 if args.soak else 1)
    pool = await create_pool(bench_dsn, max_size=4)
    ledger = PostgresLedger(pool)
    relay = await start_relay(bench_dsn, bootstrap, prefix)
    await warm_up(ledger, pool)
    latencies, after_return, early_rss = await steady_latency(
        ledger, bootstrap, EVENTS.full_name(prefix), args.rate, seconds, relay.pid
    )
    rss = peak_rss_mb(relay.pid)
    await stop(relay)
    await pool.close()
    producer = await bare_producer(bootstrap)
    try:
        topic = EVENTS.full_name(await fresh_topic(bootstrap, "base_lat"))
        await warm_producer(producer, topic)
        base = await producer_latency(producer, bootstrap, topic, args.rate, args.seconds)
    finally:
        await producer.stop()
    return {
        "steady_s": seconds,
        "events_steady": len(latencies),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "after_return_p50_ms": round(statistics.median(after_return) * 1000, 2),
        "after_return_p99_ms": round(percentile(after_return, 0.99) * 1000, 2),
        "producer_p50_ms": round(statistics.median(base) * 1000, 2),
        "producer_p99_ms": round(percentile(base, 0.99) * 1000, 2),
        "relay_peak_rss_mb_first_tenth": round(early_rss, 1),
        "relay_peak_rss_mb": round(rss, 1),
    }


async def peaks(
    args: argparse.Namespace, bench_dsn: str, bootstrap: str, prefix: str
) -> tuple[dict[str, object], float]:
    """Relay drains and bare producer bursts of the same size, alternated `repeats` times (the
    machine's other load only ever slows a run down, so the best of each is compared): the
    figures, and the ratio of the bests."""
    relay_rates: list[float] = []
    from_start: list[float] = []
    producer_rates: list[float] = []
    drain_rss = 0.0
    pool = await create_pool(bench_dsn, max_size=4)
    producer = await bare_producer(bootstrap)
    try:
        base_topic = EVENTS.full_name(await fresh_topic(bootstrap, "base"))
        await warm_producer(producer, base_topic)
        for i in range(args.repeats):
            profile = args.profile if i == 0 else None
            rate, started_rate, rss = await relay_throughput(
                pool, bench_dsn, bootstrap, prefix, args.backlog, profile
            )
            relay_rates.append(rate)
            from_start.append(started_rate)
            drain_rss = max(drain_rss, rss)
            producer_rates.append(await producer_peak(producer, base_topic, args.backlog))
    finally:
        await producer.stop()
        await pool.close()
    figures: dict[str, object] = {
        "relay_events_per_s_runs": [round(x) for x in relay_rates],
        "relay_events_per_s_from_start_runs": [round(x) for x in from_start],
        "producer_events_per_s_runs": [round(x) for x in producer_rates],
        "relay_events_per_s": round(max(relay_rates)),
        "producer_events_per_s": round(max(producer_rates)),
        "ratio_of_medians": round(
            statistics.median(relay_rates) / statistics.median(producer_rates), 3
        ),
        "relay_peak_rss_mb_draining": round(drain_rss, 1),
    }
    return figures, max(relay_rates) / max(producer_rates)


async def run(args: argparse.Namespace, dsn: str, bootstrap: str) -> dict[str, object]:
    load_before = load_average()
    await warm_broker(bootstrap, args.backlog)
    async with scratch_database(dsn) as bench_dsn:
        pool = await create_pool(bench_dsn, max_size=2)
        ledger = PostgresLedger(pool)
        await ledger.create_tenant("bench")
        for i in range(SESSIONS):
            await ledger.create_session("bench", f"s{i}")
        for session in warm_up_sessions("bench"):
            await ledger.create_session("bench", session)
        await pool.close()
        prefix = await fresh_topic(bootstrap, "bench")  # warmed up by the steady phase
        latency = await steady(args, bench_dsn, bootstrap, prefix)
        peak, ratio = await peaks(args, bench_dsn, bootstrap, prefix)
    return {
        "rate": args.rate,
        **latency,
        **peak,
        "load_average": [load_before, load_average()],
        "ratio_vs_producer": round(ratio, 3),
    }


SMOKE: Final = {"rate": 100, "seconds": 1.0, "backlog": 1000, "repeats": 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=500, help="commits per second, steady")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--backlog", type=int, default=100_000, help="events for the peak run")
    parser.add_argument("--soak", action="store_true", help="a ten times longer steady phase")
    parser.add_argument("--repeats", type=int, default=3, help="peak runs of each, alternated")
    parser.add_argument("--profile", type=Path, help="pyinstrument text report of a peak run")
    args = arguments(parser, SMOKE)
    with postgres() as dsn, kafka() as bootstrap:
        result = asyncio.run(run(args, dsn, bootstrap))
    print(f"load average (1, 5, 15 min) before and after: {result['load_average']}")
    print(f"commit -> topic at {args.rate}/s over {result['steady_s']} s: "
          f"p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms; from the commit call's "
          f"return p50 {result['after_return_p50_ms']} ms, "
          f"p99 {result['after_return_p99_ms']} ms")  # fmt: skip
    print(f"bare producer at {args.rate}/s: p50 {result['producer_p50_ms']} ms, "
          f"p99 {result['producer_p99_ms']} ms")  # fmt: skip
    print(f"relay peak RSS: {result['relay_peak_rss_mb_first_tenth']} MB after the first tenth "
          f"of the steady run, {result['relay_peak_rss_mb']} MB at its end; "
          f"{result['relay_peak_rss_mb_draining']} MB draining a backlog")  # fmt: skip
    print(f"relay peak, best of {args.repeats}: {result['relay_events_per_s']} events/s "
          f"draining (runs {result['relay_events_per_s_runs']}; from the process's start "
          f"{result['relay_events_per_s_from_start_runs']})")  # fmt: skip
    print(f"bare producer, best of {args.repeats}: {result['producer_events_per_s']} events/s "
          f"(runs {result['producer_events_per_s_runs']}); ratio of the medians "
          f"{result['ratio_of_medians']}")  # fmt: skip
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
