"""Relay benchmark: commit-to-topic latency at a steady rate, and the relay's peak throughput.

    python -m benchmarks.relay [--rate 500] [--seconds 10] [--backlog 50000]

Baseline, in the same run: a bare aiokafka producer sending the same records (same keys, values
and headers) to the same broker. The relay runs as its own process (`keel-stream relay`), so its
peak RSS is its own. Last line: one JSON object with the figures and `ratio_vs_producer`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import signal
import statistics
import sys
import time
from datetime import UTC, datetime

import asyncpg
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from benchmarks.servers import kafka, postgres, scratch_database
from keel_stream.kafka.partitions import topic_partitions
from keel_stream.kafka.records import EventRecordCodec
from keel_stream.kernel import CommitRequest
from keel_stream.store import PostgresLedger, create_pool
from keel_stream.topics.admin import apply_catalog
from keel_stream.topics.catalog import EVENTS

SESSIONS = 100
WARM_UP = "warm-up"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def assigned_consumer(bootstrap: str, topic: str) -> AIOKafkaConsumer:
    """A consumer of an empty topic, positioned and warmed up before anything is sent."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=10)
    await consumer.start()
    partitions = await topic_partitions(bootstrap, [topic])
    consumer.assign(partitions)
    await consumer.seek_to_beginning(*partitions)
    await consumer.getmany(timeout_ms=100)
    return consumer


async def receive_latencies(
    consumer: AIOKafkaConsumer, count: int, timeout_s: float
) -> list[float]:
    """Seconds from committedAt to arrival, for the first `count` distinct events."""
    seen: set[tuple[str, int]] = set()
    latencies: list[float] = []
    deadline = time.monotonic() + timeout_s
    while len(seen) < count and time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=100)).values():
            now = time.time()
            for record in records:
                event = orjson.loads(record.value)
                key = (event["session"], event["seq"])
                if key in seen or event["session"] == WARM_UP:
                    continue
                seen.add(key)
                committed = datetime.fromisoformat(event["committedAt"]).timestamp()
                latencies.append(now - committed)
    return latencies


async def start_relay(dsn: str, bootstrap: str, prefix: str) -> asyncio.subprocess.Process:
    env = {**os.environ, "KEEL_TOPIC_PREFIX": prefix, "KEEL_LOG_LEVEL": "warning"}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "keel_stream", "relay", "--database-url", dsn,
        "--bootstrap", bootstrap, env=env, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:  # noqa: PTH123
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def stop(process: asyncio.subprocess.Process) -> None:
    process.send_signal(signal.SIGTERM)
    await asyncio.wait_for(process.wait(), 30)


async def steady_latency(
    ledger: PostgresLedger, bootstrap: str, topic: str, rate: int, seconds: float
) -> list[float]:
    total = int(rate * seconds)
    consumer = await assigned_consumer(bootstrap, topic)
    receiving = asyncio.create_task(receive_latencies(consumer, total, seconds + 60))
    started = time.monotonic()
    for i in range(total):
        delay = started + i / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await ledger.commit(
            CommitRequest(
                tenant_id="bench",
                session_id=f"s{i % SESSIONS}",
                kind="user.message",
                payload={"text": f"steady {i}"},
            )
        )
    latencies = await receiving
    await consumer.stop()
    return latencies


async def warm_up(ledger: PostgresLedger, pool: asyncpg.Pool) -> None:
    """Measure a running relay, not its start: one event committed and published first."""
    await ledger.commit(
        CommitRequest(
            tenant_id="bench", session_id=WARM_UP, kind="user.message", payload={"text": "warm"}
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
    pool: asyncpg.Pool, dsn: str, bootstrap: str, prefix: str, n: int
) -> float:
    await fill_backlog(pool, n)
    started = time.monotonic()
    relay = await start_relay(dsn, bootstrap, prefix)
    while await pool.fetchval("SELECT count(*) FROM outbox") > 0:
        await asyncio.sleep(0.05)
    elapsed = time.monotonic() - started
    await stop(relay)
    return n / elapsed


async def producer_baseline(
    bootstrap: str, topic: str, latency_topic: str, n: int, rate: int, seconds: float
) -> dict[str, float]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=256 * 1024
    )
    await producer.start()
    try:
        records = [
            EventRecordCodec.encode(
                "bench", f"s{i % SESSIONS}", i // SESSIONS + 1, "user.message",
                {"text": f"backlog {i}"}, datetime.now(UTC),
            )
            for i in range(n)
        ]  # fmt: skip
        started = time.monotonic()
        futures = [
            await producer.send(topic, value=r.value, key=r.key, headers=r.headers) for r in records
        ]
        await asyncio.gather(*futures)
        throughput = n / (time.monotonic() - started)

        total = int(rate * seconds)
        consumer = await assigned_consumer(bootstrap, latency_topic)
        receiving = asyncio.create_task(receive_latencies(consumer, total, seconds + 60))
        begun = time.monotonic()
        for i in range(total):
            delay = begun + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            record = EventRecordCodec.encode(
                "base", f"s{i % SESSIONS}", i + 1, "user.message", {"text": f"steady {i}"},
                datetime.now(UTC),
            )  # fmt: skip
            await producer.send(
                latency_topic, value=record.value, key=record.key, headers=record.headers
            )
        latencies = await receiving
        await consumer.stop()
    finally:
        await producer.stop()
    return {
        "events_per_s": throughput,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
    }


async def run(args: argparse.Namespace, dsn: str, bootstrap: str) -> dict[str, float]:
    prefix = f"bench_{secrets.token_hex(3)}."
    base_prefix = f"base_{secrets.token_hex(3)}."
    base_latency_prefix = f"base_lat_{secrets.token_hex(3)}."
    for each in (prefix, base_prefix, base_latency_prefix):
        await apply_catalog(bootstrap, each)
    async with scratch_database(dsn) as bench_dsn:
        pool = await create_pool(bench_dsn, max_size=4)
        ledger = PostgresLedger(pool)
        await ledger.create_tenant("bench")
        for i in range(SESSIONS):
            await ledger.create_session("bench", f"s{i}")
        await ledger.create_session("bench", WARM_UP)
        relay = await start_relay(bench_dsn, bootstrap, prefix)
        await warm_up(ledger, pool)
        latencies = await steady_latency(
            ledger, bootstrap, EVENTS.full_name(prefix), args.rate, args.seconds
        )
        rss = peak_rss_mb(relay.pid)
        await stop(relay)
        throughput = await relay_throughput(pool, bench_dsn, bootstrap, prefix, args.backlog)
        await pool.close()
    baseline = await producer_baseline(
        bootstrap,
        EVENTS.full_name(base_prefix),
        EVENTS.full_name(base_latency_prefix),
        args.backlog,
        args.rate,
        args.seconds,
    )
    return {
        "rate": args.rate,
        "events_steady": len(latencies),
        "p50_ms": round(statistics.median(latencies) * 1000, 2),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 2),
        "relay_events_per_s": round(throughput),
        "producer_events_per_s": round(baseline["events_per_s"]),
        "producer_p50_ms": round(baseline["p50_ms"], 2),
        "producer_p99_ms": round(baseline["p99_ms"], 2),
        "ratio_vs_producer": round(throughput / baseline["events_per_s"], 3),
        "relay_peak_rss_mb": round(rss, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=int, default=500, help="commits per second, steady")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--backlog", type=int, default=50_000, help="events for the peak run")
    args = parser.parse_args()
    with postgres() as dsn, kafka() as bootstrap:
        result = asyncio.run(run(args, dsn, bootstrap))
    print(f"commit -> topic at {args.rate}/s: p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms")
    print(f"bare producer at {args.rate}/s: p50 {result['producer_p50_ms']} ms, "
          f"p99 {result['producer_p99_ms']} ms")  # fmt: skip
    print(f"relay peak: {result['relay_events_per_s']} events/s; bare producer "
          f"{result['producer_events_per_s']} events/s")  # fmt: skip
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
