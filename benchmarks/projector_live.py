"""The live projector against the commit ceiling: does it keep up, and how far behind is it?

    python -m benchmarks.projector_live [--sessions 64] [--seconds 10] [--find-seconds 5]
        [--rate N] [--profile projector-profile.txt] [--log services.log] [--smoke]

The relay and the projector (`keel-stream relay`, `keel-stream projections run`) run as their own
processes against PostgreSQL and the broker of benchmarks/servers.py. First the ceiling: every
session commits turns (a user message, then the answer to it) as fast as it can for
`--find-seconds`; the commits per second reached is the max sustained commit rate (the relay and
the projector running). Then the same load runs paced at that rate (or `--rate`) for `--seconds`,
and each commit's lag is measured: from its committedAt to the moment the read model includes its
seq (a watcher woken by the projector's NOTIFY, polling every 50 ms), per projection; the events
the models are behind the ledger and the outbox rows not yet published are sampled every 100 ms,
and the CPU the relay and the projector used per event. `--profile` runs the projector under
pyinstrument and writes its report there (that run's lag is the profiler's, not a figure).

Last line: one JSON object with the figures, the load average and the peak RSS of the relay and
the projector; `lag_p99_s` (the worst projection's) comes last, against the goal of under 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Final

import asyncpg
import orjson

from benchmarks.cli import arguments
from benchmarks.processes import cpu_s, peak_rss_mb, process, scrape
from benchmarks.servers import kafka, postgres, scratch_database
from keel_stream.kafka.admin import apply_catalog
from keel_stream.kafka.broker import free_port
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import CommitRequest, LeaseToken
from keel_stream.projections import ALL
from keel_stream.store import PostgresLedger, create_pool

BATCH_METRICS = {
    "keel_projector_batch_seconds_count": "batches",
    "keel_projector_batch_seconds_sum": "batch_seconds",
    'keel_projector_applied_events_total{projection="transcript"}': "applied",
}
TENANT = "bench"
LEASE = LeaseToken(owner="bench", epoch=1)
LIVE_STATES = (
    "SELECT p.projection, p.session_id, p.last_seq FROM projection_states AS p"
    " JOIN projection_generations AS g USING (projection, generation) WHERE g.status = 'live'"
)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


@dataclass
class Sessions:
    """The sessions committed to, each committing turns in order."""

    ledger: PostgresLedger
    names: list[str]
    committed: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    """Per session, (seq, committedAt as a timestamp) of every commit measured."""
    measuring: bool = False

    async def _commit(self, request: CommitRequest) -> int:
        done = await self.ledger.commit(request)
        if self.measuring:  # before the loop runs anything else: the watcher cannot see it first
            self.committed.setdefault(request.session_id, []).append(
                (done.seq, done.committed_at.timestamp())
            )
        return done.seq

    async def turn(self, session: str, n: int) -> int:
        """One turn: a user message and the answer to it; returns the commits made."""
        question = await self._commit(
            CommitRequest(
                tenant_id=TENANT, session_id=session, kind="user.message",
                payload={"text": f"question {n}"},
            )
        )  # fmt: skip
        content = [{"type": "text", "text": f"answer {n}: " + "x" * 200}]
        await self._commit(
            CommitRequest(
                tenant_id=TENANT, session_id=session, kind="assistant.message",
                payload={"content": content, "inputSeqs": [question], "stopReason": "end_turn"},
                lease=LEASE,
            )
        )  # fmt: skip
        return 2


async def prepare(pool: asyncpg.Pool, count: int) -> Sessions:
    ledger = PostgresLedger(pool)
    await ledger.create_tenant(TENANT)
    names = [await ledger.create_session(TENANT, f"s{i:03d}") for i in range(count)]
    await pool.execute(
        "INSERT INTO runs (tenant_id, session_id, status, lease_owner, lease_epoch,"
        " lease_expires_at, attempts)"
        " SELECT $1, s, 'running', $2, $3, now() + interval '1 day', 1 FROM unnest($4::text[]) s",
        TENANT, LEASE.owner, LEASE.epoch, names,
    )  # fmt: skip
    return Sessions(ledger, names)


async def ceiling(sessions: Sessions, seconds: float) -> float:
    """Commits per second with every session committing turns back to back."""
    deadline = time.monotonic() + seconds
    done = 0

    async def session_loop(name: str) -> None:
        nonlocal done
        n = 0
        while time.monotonic() < deadline:
            made = await sessions.turn(name, n)  # not `done += await`: it would read done first
            done += made
            n += 1

    started = time.monotonic()
    await asyncio.gather(*(session_loop(name) for name in sessions.names))
    return done / (time.monotonic() - started)


async def paced(sessions: Sessions, rate: float, seconds: float) -> int:
    """Turns at `rate` commits per second over all sessions, each session on its own schedule
    (a late session catches up at once); returns the commits made."""
    per_session = rate / len(sessions.names) / 2  # turns per second per session
    total = 0

    async def session_loop(index: int, name: str) -> None:
        nonlocal total
        start = time.monotonic() + index / len(sessions.names) / per_session
        turns = int(seconds * per_session)
        for n in range(turns):
            delay = start + n / per_session - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            made = await sessions.turn(name, 10_000 + n)
            total += made

    await asyncio.gather(*(session_loop(i, name) for i, name in enumerate(sessions.names)))
    return total


class Watcher:
    """Reads the live models' seqs whenever the projector notifies (and every 50 ms)."""

    def __init__(self, pool: asyncpg.Pool, sessions: Sessions) -> None:
        self._pool = pool
        self._sessions = sessions
        self._woken = asyncio.Event()
        self.seen: dict[tuple[str, str], int] = {}
        self._matched: dict[tuple[str, str], int] = {}
        """Per (projection, session), how many of the session's commits were seen."""
        self.lags: dict[str, list[float]] = {p.name: [] for p in ALL}
        self.behind: list[int] = []
        self.outbox: list[int] = []
        """Outbox rows the relay has not published yet (sampled with `behind`)."""

    def notified(self, *_: object) -> None:
        self._woken.set()

    async def heads(self) -> list[asyncpg.Record]:
        return list(await self._pool.fetch("SELECT session_id, last_seq FROM sessions"))

    async def run(self, stop: asyncio.Event) -> None:
        last_sample = 0.0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), 0.05)
            self._woken.clear()
            now = time.time()
            rows = await self._pool.fetch(LIVE_STATES)
            for r in rows:
                self._advance(r["projection"], r["session_id"], r["last_seq"], now)
            if now - last_sample >= 0.1:
                last_sample = now
                self.behind.append(await self._behind(rows))
                self.outbox.append(int(await self._pool.fetchval("SELECT count(*) FROM outbox")))

    def _advance(self, projection: str, session: str, seq: int, now: float) -> None:
        before = self.seen.get((projection, session), 0)
        if seq <= before:
            return
        self.seen[(projection, session)] = seq
        commits = self._sessions.committed.get(session, [])
        i = self._matched.get((projection, session), 0)
        while i < len(commits) and commits[i][0] <= seq:
            if commits[i][0] > before:
                self.lags[projection].append(now - commits[i][1])
            i += 1
        self._matched[(projection, session)] = i

    async def _behind(self, rows: list[asyncpg.Record]) -> int:
        head = await self._pool.fetchval("SELECT sum(last_seq) FROM sessions")
        applied: int = min(
            sum(r["last_seq"] for r in rows if r["projection"] == p.name) for p in ALL
        )
        return int(head or 0) - applied


async def caught_up(watcher: Watcher, sessions: Sessions, timeout_s: float) -> float:
    """Wait until every live model includes every committed seq; the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        heads = await watcher.heads()
        if all(
            watcher.seen.get((p.name, r["session_id"]), 0) >= r["last_seq"]
            for r in heads
            for p in ALL
        ):
            return time.monotonic() - started
        await asyncio.sleep(0.05)
    raise TimeoutError("the read models did not catch up with the ledger")


def commands(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    python = [sys.executable, "-m"]
    projector = [*python, "keel_stream", "projections", "run"]
    if args.profile:
        projector = [
            *python,
            "pyinstrument",
            "-r",
            "text",
            "-o",
            args.profile,
            "-m",
            *projector[2:],
        ]
    return [*python, "keel_stream", "relay"], projector


async def measure(
    args: argparse.Namespace, pool: asyncpg.Pool, sessions: Sessions, env: dict[str, str]
) -> dict[str, object]:
    relay_cmd, projector_cmd = commands(args)
    log = args.log or os.path.join(env["KEEL_DATA_DIR"], "services.log")  # noqa: PTH118
    relay_env = {k: v for k, v in env.items() if k != "KEEL_METRICS_PORT"}
    async with (
        process(*relay_cmd, env=relay_env, log=log) as relay,
        process(*projector_cmd, env=env, log=log) as projector,
    ):
        conn = await asyncpg.connect(env["KEEL_DATABASE_URL"])  # the listener's own
        watcher = Watcher(pool, sessions)
        await conn.add_listener("keel_projections", watcher.notified)
        stop = asyncio.Event()
        watching = asyncio.create_task(watcher.run(stop))
        try:
            await asyncio.gather(*(sessions.turn(name, 0) for name in sessions.names))
            await caught_up(watcher, sessions, 180)  # the projector has started and applies
            top = await ceiling(sessions, args.find_seconds)
            drain_s = await caught_up(watcher, sessions, 600)
            rate = args.rate or top
            watcher.behind.clear()
            watcher.outbox.clear()
            sessions.measuring = True
            began, cpu = time.monotonic(), (cpu_s(relay), cpu_s(projector))
            commits = await paced(sessions, rate, args.seconds)
            achieved = commits / (time.monotonic() - began)
            sessions.measuring = False
            tail_s = await caught_up(watcher, sessions, 600)
            counters = {
                "relay_cpu_ms_per_event": (cpu_s(relay) - cpu[0]) / commits * 1000,
                "projector_cpu_ms_per_event": (cpu_s(projector) - cpu[1]) / commits * 1000,
            }
            counters.update(await scrape(int(env["KEEL_METRICS_PORT"]), BATCH_METRICS))
        finally:
            stop.set()
            await watching
            await conn.close()
        rss = {
            "relay_peak_rss_mb": peak_rss_mb(relay),
            "projector_peak_rss_mb": peak_rss_mb(projector),
        }
    return summary(top, drain_s, rate, achieved, tail_s, watcher, counters, rss)


def summary(
    top: float,
    drain_s: float,
    rate: float,
    achieved: float,
    tail_s: float,
    watcher: Watcher,
    counters: dict[str, float],
    rss: dict[str, float],
) -> dict[str, object]:
    lags = {name: sorted(values) for name, values in watcher.lags.items()}
    batches = counters.get("batches", 0.0) or 1.0
    return {
        "ceiling_commits_per_s": round(top),
        "backlog_drain_after_ceiling_s": round(drain_s, 2),
        "rate": round(rate),
        "achieved_commits_per_s": round(achieved),
        "commits_measured": len(lags["transcript"]),
        **{
            f"{name}_lag_ms": {
                "p50": round(percentile(v, 0.5) * 1000, 1),
                "p99": round(percentile(v, 0.99) * 1000, 1),
                "max": round((v[-1] if v else 0.0) * 1000, 1),
            }
            for name, v in lags.items()
        },
        "events_behind_p99": round(percentile([float(b) for b in watcher.behind], 0.99)),
        "relay_backlog_p99": round(percentile([float(b) for b in watcher.outbox], 0.99)),
        "tail_after_last_commit_s": round(tail_s, 2),
        "projector_batches": round(counters.get("batches", 0.0)),
        "mean_batch_ms": round(counters.get("batch_seconds", 0.0) / batches * 1000, 2),
        "mean_batch_events": round(counters.get("applied", 0.0) / batches, 1),
        "projector_cpu_ms_per_event": round(counters["projector_cpu_ms_per_event"], 3),
        "relay_cpu_ms_per_event": round(counters["relay_cpu_ms_per_event"], 3),
        **{k: round(v, 1) for k, v in rss.items()},
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "lag_p99_s": round(max(percentile(v, 0.99) for v in lags.values()), 3),
    }


async def run(args: argparse.Namespace, dsn: str, bootstrap: str) -> dict[str, object]:
    prefix = f"live_{secrets.token_hex(3)}."
    await apply_catalog(KafkaSettings(bootstrap), prefix)
    async with scratch_database(dsn) as bench_dsn:
        pool = await create_pool(bench_dsn, max_size=args.sessions + 4)
        try:
            sessions = await prepare(pool, args.sessions)
            with tempfile.TemporaryDirectory(prefix="keel-live-") as data_dir:
                env = {
                    **os.environ,
                    "KEEL_DATABASE_URL": bench_dsn,
                    "KEEL_KAFKA_BOOTSTRAP": bootstrap,
                    "KEEL_TOPIC_PREFIX": prefix,
                    "KEEL_DATA_DIR": data_dir,
                    "KEEL_LOG_LEVEL": "warning",
                    "KEEL_METRICS_PORT": str(free_port()),
                }
                return await measure(args, pool, sessions, env)
        finally:
            await pool.close()


SMOKE: Final = {"sessions": 4, "seconds": 1.0, "find_seconds": 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0, help="the paced phase")
    parser.add_argument("--find-seconds", type=float, default=5.0, help="the ceiling phase")
    parser.add_argument("--rate", type=float, default=None, help="commits/s (default: ceiling)")
    parser.add_argument("--profile", default=None, help="pyinstrument report of the projector")
    parser.add_argument("--log", default=None, help="keep the relay's and projector's log here")
    args = arguments(parser, SMOKE)
    with postgres() as dsn, kafka() as bootstrap:
        result = asyncio.run(run(args, dsn, bootstrap))
    print(
        f"ceiling {result['ceiling_commits_per_s']} commits/s; paced at {result['rate']}/s "
        f"(achieved {result['achieved_commits_per_s']}/s)"
    )
    for p in ALL:
        print(f"{p.name:<11} commit -> visible lag ms {result[f'{p.name}_lag_ms']}")
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
