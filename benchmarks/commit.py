"""Commit throughput of the ledger against a bare INSERT baseline, measured in the same run.

    python -m benchmarks.commit [--events N] [--sessions S] [--concurrency 1,10,64] [--runs 3]
                                [--rounds 5] [--batch 8] [--profile commit-profile.txt] [--smoke]

Uses KEEL_DATABASE_URL when set, else an embedded PostgreSQL in a temporary directory. At each
concurrency C (C tasks, a pool of C open connections, at least C sessions written round robin so
that the commits in flight are to C different sessions), these phases of N events each:

- baseline: single-row INSERTs into a plain table (one statement per event, autocommit);
- ledger: `PostgresLedger.commit` (group commit past two calls in flight) of a user.message
  with its requestId, latency of each (p50/p99), one connection LISTENing on keel_commits;
- batch: `commit_many` of --batch user.messages of one session per call;
- no NOTIFY: the ledger with its wake-ups left out (what NOTIFY costs);
- NOTIFY in the transaction: the ledger as it notified before (pg_notify inside the commit's
  transaction: a copy of keel_commit with it, in a schema its pool's search_path puts first). Its
  pool is another one (two pools of 64 would pass max_connections), with a baseline of its own.

The phases run interleaved, N/--rounds events at a time in turn, so that a change in the load of
the machine weighs on all of them alike; ratios are against the baseline of the same pool. Each
phase also reports CPU seconds per 1000 events: the client's (this process) and the server
backends' (from /proc), so the bound is visible. The whole set runs --runs times (a fresh scratch
database each); the summary is the median. `--profile` runs one more ledger phase (at 10, or the
highest concurrency below it) under pyinstrument, sampling this process (the event loop's idle
wait shows as `epoll.poll`), and writes its text report there. Last line: one JSON object,
`ratio_vs_insert` last.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import asyncpg
import orjson

from benchmarks.cli import arguments
from benchmarks.servers import postgres, scratch_database
from keel_stream.kernel import CommitRequest
from keel_stream.store import PostgresLedger, connect
from keel_stream.store.connect import init_connection
from keel_stream.store.sqlfiles import sql_root

SMOKE: Final = {"events": 200, "sessions": 4, "concurrency": "1,4", "runs": 1, "rounds": 1}
IN_TXN_SCHEMA = "keel_bench_notify_in_txn"
CREATED = "        out_seq := v_last;\n"
IN_TXN_NOTIFY = (
    "        PERFORM pg_notify('keel_commits', v_tenant || '/' || v_session || '/' || v_last);\n"
)
Work = Callable[[], Awaitable[object]]
Figures = dict[str, dict[str, float]]
"""Per phase: events/s, p50/p99 latency of a call, client and server CPU s per 1000 events."""


class QuietLedger(PostgresLedger):
    """The ledger without its wake-ups."""

    async def _wake(self, conn: asyncpg.Connection, payloads: list[str]) -> None:
        return None


def percentile(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def _ticks(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes used so far (0 where /proc is unreadable)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@dataclass
class Tally:
    """One phase's events, time, latencies and CPU, summed over its rounds."""

    events: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)
    client_cpu: float = 0.0
    server_cpu: float = 0.0

    def figures(self) -> dict[str, float]:
        per_k = 1000 / self.events
        return {
            "per_s": self.events / self.seconds,
            "p50_ms": percentile(self.latencies, 0.50) * 1000,
            "p99_ms": percentile(self.latencies, 0.99) * 1000,
            "client_cpu_s_per_k": self.client_cpu * per_k,
            "server_cpu_s_per_k": self.server_cpu * per_k,
        }


async def _timed(
    work: list[Work], concurrency: int, backends: list[int], tally: Tally, per_call: int = 1
) -> None:
    """Run the work with `concurrency` tasks, adding to the tally (`per_call` events a call)."""
    queue = list(reversed(work))

    async def worker() -> None:
        while queue:
            call = queue.pop()
            began = time.perf_counter()
            await call()
            tally.latencies.append(time.perf_counter() - began)

    cpu, server = _own_cpu(), _ticks(backends)
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    tally.seconds += time.perf_counter() - started
    tally.client_cpu += _own_cpu() - cpu
    tally.server_cpu += _ticks(backends) - server
    tally.events += len(work) * per_call


async def _interleaved(
    phases: dict[str, tuple[Callable[[int, int], list[Work]], int]],
    args: argparse.Namespace,
    concurrency: int,
    backends: list[int],
) -> dict[str, Tally]:
    """Each phase's events in --rounds slices, the phases taking turns (order rotating)."""
    tallies = {name: Tally() for name in phases}
    names, size = list(phases), args.events // args.rounds
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            make, per_call = phases[name]
            await _timed(make(r * size, size), concurrency, backends, tallies[name], per_call)
    return tallies


async def _install_in_txn(dsn: str) -> None:
    """keel_commit with pg_notify inside, as before: in a schema a search_path puts first."""
    migration = sql_root().joinpath("migrations", "0053_keel_commit_gate.sql").read_text("utf-8")
    source = migration[migration.index("CREATE FUNCTION keel_commit(") :]  # not its DROP
    assert source.count(CREATED) == 1, "keel_commit creates an event in one place"
    function = source.replace(CREATED, IN_TXN_NOTIFY + CREATED).replace(
        "FUNCTION keel_commit(", f"FUNCTION {IN_TXN_SCHEMA}.keel_commit("
    )
    conn = await connect(dsn)
    try:
        await conn.execute(f"CREATE SCHEMA {IN_TXN_SCHEMA}")
        await conn.execute(function)
    finally:
        await conn.close()


async def _pool(dsn: str, size: int, search_path: str | None = None) -> asyncpg.Pool:
    settings = {"search_path": search_path} if search_path else None
    pool = await asyncpg.create_pool(
        dsn, min_size=size, max_size=size, init=init_connection, server_settings=settings
    )
    assert pool is not None
    return pool


async def _sessions(ledger: PostgresLedger, prefix: str, count: int) -> list[str]:
    return [await ledger.create_session("bench", f"{prefix}{i}") for i in range(count)]


def _commits(ledger: PostgresLedger, ids: list[str]) -> Callable[[int, int], list[Work]]:
    def one(i: int) -> Work:
        request = CommitRequest(
            tenant_id="bench",
            session_id=ids[i % len(ids)],
            kind="user.message",
            payload={"text": f"message {i}"},
            key=f"r{i}",
        )
        return lambda: ledger.commit(request)

    return lambda start, count: [one(i) for i in range(start, start + count)]


def _batches(ledger: PostgresLedger, ids: list[str], size: int) -> Callable[[int, int], list[Work]]:
    def one(b: int) -> Work:
        requests = [
            CommitRequest(
                tenant_id="bench",
                session_id=ids[b % len(ids)],
                kind="user.message",
                payload={"text": f"message {b}.{i}"},
                key=f"b{b}.{i}",
            )
            for i in range(size)
        ]
        return lambda: ledger.commit_many(requests)

    return lambda start, count: [one(b) for b in range(start // size, (start + count) // size)]


def _inserts(pool: asyncpg.Pool, ids: list[str]) -> Callable[[int, int], list[Work]]:
    def one(i: int) -> Work:
        return lambda: pool.execute(
            "INSERT INTO baseline VALUES ($1, $2, $3)", ids[i % len(ids)], i, {"text": str(i)}
        )

    return lambda start, count: [one(i) for i in range(start, start + count)]


async def _backends(pool: asyncpg.Pool) -> list[int]:
    """The database's backends: the pool's, the listener's."""
    rows = await pool.fetch("SELECT pid FROM pg_stat_activity WHERE datname = current_database()")
    return [row["pid"] for row in rows]


async def _level(dsn: str, args: argparse.Namespace, c: int) -> Figures:
    listener = await connect(dsn)
    heard: list[str] = []
    await listener.add_listener("keel_commits", lambda *a: heard.append(a[3]))
    warm = 2 * c  # every connection prepares its statements before the clock
    try:
        shipped = await _shipped(dsn, args, c)
        await _wait_heard(heard, warm + 2 * args.events)
        # One pool at a time: two of 64 connections would pass max_connections (100).
        in_txn = await _in_txn(dsn, args, c)
        await _wait_heard(heard, 2 * warm + 3 * args.events)
        return {name: tally.figures() for name, tally in (shipped | in_txn).items()}
    finally:
        await listener.close()


async def _shipped(dsn: str, args: argparse.Namespace, c: int) -> dict[str, Tally]:
    """The baseline, the ledger, its batches and the ledger without NOTIFY, through one pool."""
    pool = await _pool(dsn, c)
    try:
        ledger = PostgresLedger(pool)
        count = max(args.sessions, c)
        ids, batch_ids = (
            await _sessions(ledger, f"{c}n", count),
            await _sessions(ledger, f"{c}b", count),
        )
        quiet_ids = await _sessions(ledger, f"{c}q", count)
        await _timed(_inserts(pool, ids)(-2 * c, 2 * c), c, [], Tally())
        await _timed(_commits(ledger, ids)(-2 * c, 2 * c), c, [], Tally())
        phases = {
            "baseline": (_inserts(pool, ids), 1),
            "ledger": (_commits(ledger, ids), 1),
            "batch": (_batches(ledger, batch_ids, args.batch), args.batch),
            "no_notify": (_commits(QuietLedger(pool), quiet_ids), 1),
        }
        return await _interleaved(phases, args, c, await _backends(pool))
    finally:
        await pool.close()


async def _in_txn(dsn: str, args: argparse.Namespace, c: int) -> dict[str, Tally]:
    """The ledger with NOTIFY inside the commit's transaction, against a baseline of its pool."""
    pool = await _pool(dsn, c, f"{IN_TXN_SCHEMA}, public")
    try:
        ledger = QuietLedger(pool)
        ids = await _sessions(ledger, f"{c}t", max(args.sessions, c))
        await _timed(_commits(ledger, ids)(-2 * c, 2 * c), c, [], Tally())
        phases = {
            "in_txn_baseline": (_inserts(pool, ids), 1),
            "notify_in_txn": (_commits(ledger, ids), 1),
        }
        return await _interleaved(phases, args, c, await _backends(pool))
    finally:
        await pool.close()


async def _wait_heard(heard: list[str], expected: int) -> None:
    """Every commit's wake-up arrived, and no other (the quiet ledger sent none)."""
    deadline = time.monotonic() + 30
    while len(heard) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.2)
    assert len(heard) == expected, f"the listener heard {len(heard)} of {expected} wake-ups"


async def _prepared(dsn: str) -> None:
    conn = await connect(dsn)
    try:
        await conn.execute("CREATE TABLE baseline (s text, n int, payload jsonb)")
    finally:
        await conn.close()
    await _install_in_txn(dsn)
    pool = await _pool(dsn, 1)
    await PostgresLedger(pool).create_tenant("bench")
    await pool.close()


async def _run(dsn: str, args: argparse.Namespace, levels: list[int]) -> dict[int, Figures]:
    async with scratch_database(dsn) as bench_dsn:
        await _prepared(bench_dsn)
        return {c: await _level(bench_dsn, args, c) for c in levels}


async def _profile(dsn: str, args: argparse.Namespace, concurrency: int) -> str:
    from pyinstrument import Profiler

    async with scratch_database(dsn) as bench_dsn:
        await _prepared(bench_dsn)
        pool = await _pool(bench_dsn, concurrency)
        ledger = PostgresLedger(pool)
        commits = _commits(ledger, await _sessions(ledger, "p", max(args.sessions, concurrency)))
        await _timed(commits(-concurrency, concurrency), concurrency, [], Tally())
        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.start()
        await _timed(commits(0, args.events), concurrency, [], Tally())
        profiler.stop()
        await pool.close()
        return str(profiler.output_text(unicode=True, show_all=False))


def _ratio(f: Figures, phase: str) -> float:
    base = f["in_txn_baseline" if phase == "notify_in_txn" else "baseline"]["per_s"]
    return f[phase]["per_s"] / base


def _line(level: int, run: int, f: Figures) -> str:
    led = f["ledger"]
    return (
        f"run {run} C={level:<3} INSERT {f['baseline']['per_s']:6.0f}/s | commit "
        f"{led['per_s']:6.0f}/s ratio {_ratio(f, 'ledger'):.2f} p50 {led['p50_ms']:.1f} ms "
        f"p99 {led['p99_ms']:.1f} ms cpu/1k client {led['client_cpu_s_per_k']:.2f} s server "
        f"{led['server_cpu_s_per_k']:.2f} s | no NOTIFY {_ratio(f, 'no_notify'):.2f} | NOTIFY "
        f"in txn {_ratio(f, 'notify_in_txn'):.2f} | batch {_ratio(f, 'batch'):.2f}"
    )


def _summary(runs: list[dict[int, Figures]], levels: list[int]) -> dict[str, Any]:
    def median(level: int, phase: str, name: str) -> float:
        return round(statistics.median(run[level][phase][name] for run in runs), 3)

    summary: dict[str, Any] = {}
    for level in levels:
        figures: dict[str, Any] = {"inserts_per_s": median(level, "baseline", "per_s")}
        for phase in ("ledger", "batch", "no_notify", "notify_in_txn"):
            ratios = [round(_ratio(run[level], phase), 3) for run in runs]
            figures[phase] = {
                "ratio": statistics.median(ratios),
                "ratios": ratios,
                **{name: median(level, phase, name) for name in runs[0][level][phase]},
            }
        figures["baseline"] = {
            name: median(level, "baseline", name) for name in runs[0][level]["baseline"]
        }
        summary[str(level)] = figures
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--concurrency", default="1,10,64")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--profile", help="write a pyinstrument report of a ledger phase here")
    args = arguments(parser, SMOKE)
    levels = [int(c) for c in args.concurrency.split(",")]
    load_before = os.getloadavg()
    runs: list[dict[int, Figures]] = []
    with postgres() as dsn:
        for run in range(1, args.runs + 1):
            runs.append(asyncio.run(_run(dsn, args, levels)))
            for level in levels:
                print(_line(level, run, runs[-1][level]), flush=True)
        if args.profile:
            profiled = max([c for c in levels if c <= 10] or levels)
            Path(args.profile).write_text(asyncio.run(_profile(dsn, args, profiled)))
            print(f"profile written to {args.profile}")
    summary = _summary(runs, levels)
    result = {
        "events": args.events,
        "sessions": args.sessions,
        "runs": args.runs,
        "batch": args.batch,
        "load_avg_before": [round(x, 2) for x in load_before],
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "levels": summary,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "ratio_vs_insert": {
            level: figures["ledger"]["ratio"] for level, figures in summary.items()
        },
    }
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
