"""Replay-from-zero throughput of each projection's rebuild, against a bare consumer.

    python -m benchmarks.replay [--events 100000] [--sessions 100] [--profile DIR] [--smoke]

Loads the ledger in bulk (alternating user and assistant messages), publishes the same events to
a fresh keel.events.v1 with a bare producer, then measures, for each projection in turn: a bare
aiokafka consumer reading and JSON-decoding the whole topic (its baseline, read just before it so
that the load of a shared machine weighs on both alike), and `rebuild` of the projection (decode,
fold in memory, flushes in the background, a transcript's entries with COPY, ledger leveling,
switch), with the CPU seconds of each. `--profile DIR` writes a pyinstrument report per rebuild
(those rates are the profiler's). Last line: one JSON object with the figures, the load average,
peak RSS and, last, `ratio_vs_consumer` per projection.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import asyncpg
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from pyinstrument import Profiler

from benchmarks.cli import arguments
from benchmarks.servers import kafka, postgres, scratch_database
from keel_stream.kafka.admin import apply_catalog
from keel_stream.kafka.partitions import topic_partitions
from keel_stream.kafka.records import EventRecordCodec
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.projections import ALL
from keel_stream.projector.rebuild import rebuild
from keel_stream.store import create_pool
from keel_stream.store.projection_state import PostgresProjectionStore
from keel_stream.topics.catalog import EVENTS


async def load_ledger(pool: asyncpg.Pool, events: int, sessions: int) -> None:
    per_session = events // sessions
    await pool.execute("INSERT INTO tenants (tenant_id) VALUES ('bench')")
    await pool.execute(
        "INSERT INTO sessions (tenant_id, session_id, last_seq)"
        " SELECT 'bench', 's' || g, $2 FROM generate_series(0, $1 - 1) AS g",
        sessions,
        per_session,
    )
    await pool.execute(
        """
        INSERT INTO events (tenant_id, session_id, seq, kind, payload, request_digest)
        SELECT 'bench', 's' || g, n,
               CASE WHEN n % 2 = 1 THEN 'user.message' ELSE 'assistant.message' END,
               CASE WHEN n % 2 = 1
                    THEN jsonb_build_object('text', 'question ' || n)
                    ELSE jsonb_build_object(
                        'content', jsonb_build_array(
                            jsonb_build_object('type', 'text', 'text', 'answer ' || n)),
                        'inputSeqs', jsonb_build_array(n - 1),
                        'stopReason', 'end_turn')
               END,
               ''
        FROM generate_series(0, $1 - 1) AS g CROSS JOIN generate_series(1, $2) AS n
        """,
        sessions,
        per_session,
    )


async def publish_ledger(pool: asyncpg.Pool, bootstrap: str, topic: str) -> int:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, max_batch_size=512 * 1024
    )
    await producer.start()
    sent = 0
    try:
        async with pool.acquire() as conn, conn.transaction():
            cursor = conn.cursor(
                "SELECT tenant_id, session_id, seq, kind, payload, committed_at FROM events"
                " ORDER BY session_id, seq"
            )
            futures = []
            async for r in cursor:
                record = EventRecordCodec.encode(
                    r["tenant_id"], r["session_id"], r["seq"], r["kind"], r["payload"],
                    r["committed_at"],
                )  # fmt: skip
                futures.append(await producer.send(topic, value=record.value, key=record.key))
                sent += 1
            await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return sent


async def bare_consumer(bootstrap: str, topic: str, expected: int) -> float:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await consumer.start()
    try:
        partitions = await topic_partitions(KafkaSettings(bootstrap), [topic])
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        started = time.monotonic()
        read = 0
        while read < expected:
            for records in (await consumer.getmany(timeout_ms=200, max_records=20_000)).values():
                for record in records:
                    orjson.loads(record.value)
                    read += 1
        return read / (time.monotonic() - started)
    finally:
        await consumer.stop()


async def measure(
    pool: asyncpg.Pool, bootstrap: str, prefix: str, sent: int, profile: str | None
) -> dict[str, dict[str, float]]:
    """Per projection: the bare consumer read just before it (its baseline, so load that
    drifts during the run is in both), then its rebuild; wall rates and CPU seconds of each."""
    topic = EVENTS.full_name(prefix)
    figures: dict[str, dict[str, float]] = {}
    for projection in ALL:
        cpu = time.process_time()
        baseline = await bare_consumer(bootstrap, topic, sent)
        baseline_cpu = time.process_time() - cpu
        profiler = Profiler(async_mode="enabled") if profile else None
        if profiler is not None:
            profiler.start()
        cpu = time.process_time()
        report = await rebuild(
            PostgresProjectionStore(pool),
            KafkaSettings(bootstrap),
            projection.name,
            topic_prefix=prefix,
        )
        rebuild_cpu = time.process_time() - cpu
        if profiler is not None and profile is not None:
            profiler.stop()
            path = Path(profile) / f"replay-{projection.name}.txt"
            path.write_text(profiler.output_text(unicode=True, show_all=False))
        rate = report.events / report.seconds
        figures[projection.name] = {
            "events_per_s": rate,
            "consumer_events_per_s": baseline,
            "ratio": rate / baseline,
            "rebuild_cpu_s": rebuild_cpu,
            "consumer_cpu_s": baseline_cpu,
        }
        print(
            f"rebuild {projection.name:<11} {rate:10,.0f} events/s ({report.seconds:.2f} s, "
            f"{rebuild_cpu:.2f} s CPU); bare consumer {baseline:10,.0f} events/s "
            f"({baseline_cpu:.2f} s CPU): {rate / baseline:.3f}"
        )
    return figures


async def run(args: argparse.Namespace, dsn: str, bootstrap: str) -> dict[str, object]:
    prefix = f"replay_{secrets.token_hex(3)}."
    await apply_catalog(KafkaSettings(bootstrap), prefix)
    async with scratch_database(dsn) as bench_dsn:
        pool = await create_pool(bench_dsn, max_size=4)
        try:
            await load_ledger(pool, args.events, args.sessions)
            sent = await publish_ledger(pool, bootstrap, EVENTS.full_name(prefix))
            figures = await measure(pool, bootstrap, prefix, sent, args.profile)
        finally:
            await pool.close()
    return {
        "events": sent,
        "sessions": args.sessions,
        **{
            f"{name}_{key}": round(value, 3) if key.endswith("cpu_s") else round(value)
            for name, f in figures.items()
            for key, value in f.items()
            if key != "ratio"
        },
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "measured_at": datetime.now(UTC).isoformat(),
        "ratio_vs_consumer": {name: round(f["ratio"], 3) for name, f in figures.items()},
    }


SMOKE: Final = {"events": 1000, "sessions": 10}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument(
        "--profile", default=None, help="a directory for a pyinstrument report per rebuild"
    )
    args = arguments(parser, SMOKE)
    with postgres() as dsn, kafka() as bootstrap:
        result = asyncio.run(run(args, dsn, bootstrap))
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
