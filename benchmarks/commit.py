"""Commit throughput of the ledger against a bare INSERT baseline, measured in the same run.

    python -m benchmarks.commit [--events N] [--sessions S] [--concurrency C]

Uses KEEL_DATABASE_URL when set, else an embedded PostgreSQL in a temporary directory. The
baseline inserts the same rows into a plain table (one statement per event, autocommit) through
the same pool, so the ratio isolates what the commit transaction costs: the session lock, the
idempotency lookup, the dense seq, the outbox row and the NOTIFY. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import time
from collections.abc import Awaitable, Callable

import asyncpg
import orjson

from benchmarks.servers import postgres, scratch_database
from keel_stream.kernel import CommitRequest
from keel_stream.store import PostgresLedger, connect, create_pool


async def _timed(work: list[Callable[[], Awaitable[object]]], concurrency: int) -> float:
    queue = list(reversed(work))

    async def worker() -> None:
        while queue:
            await queue.pop()()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


async def _run(dsn: str, events: int, sessions: int, concurrency: int) -> dict[str, float]:
    async with scratch_database(dsn) as bench_dsn:
        conn = await connect(bench_dsn)
        await conn.execute("CREATE TABLE baseline (s text, n int, payload jsonb)")
        await conn.close()
        pool = await create_pool(bench_dsn, max_size=concurrency)
        try:
            return await _measure(pool, events, sessions, concurrency)
        finally:
            await pool.close()


async def _measure(
    pool: asyncpg.Pool, events: int, sessions: int, concurrency: int
) -> dict[str, float]:
    ledger = PostgresLedger(pool)
    await ledger.create_tenant("bench")
    ids = [await ledger.create_session("bench", f"s{i}") for i in range(sessions)]

    def commit(i: int) -> Callable[[], Awaitable[object]]:
        request = CommitRequest(
            tenant_id="bench",
            session_id=ids[i % sessions],
            kind="user.message",
            payload={"text": f"message {i}"},
            key=f"r{i}",
        )
        return lambda: ledger.commit(request)

    def insert(i: int) -> Callable[[], Awaitable[object]]:
        return lambda: pool.execute(
            "INSERT INTO baseline VALUES ($1, $2, $3)", ids[i % sessions], i, {"text": str(i)}
        )

    baseline_s = await _timed([insert(i) for i in range(events)], concurrency)
    ledger_s = await _timed([commit(i) for i in range(events)], concurrency)
    return {"baseline_s": baseline_s, "ledger_s": ledger_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    with postgres() as dsn:
        timings = asyncio.run(_run(dsn, args.events, args.sessions, args.concurrency))
    ledger_rate = args.events / timings["ledger_s"]
    baseline_rate = args.events / timings["baseline_s"]
    print(f"ledger commits:   {ledger_rate:10.0f} events/s")
    print(f"bare INSERT:      {baseline_rate:10.0f} events/s")
    peak_rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "events": args.events,
        "sessions": args.sessions,
        "concurrency": args.concurrency,
        "commits_per_s": round(ledger_rate),
        "baseline_inserts_per_s": round(baseline_rate),
        "ratio_vs_insert": round(ledger_rate / baseline_rate, 3),
        "peak_rss_mb": round(peak_rss_mb, 1),
    }
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
