"""Query cost at scale: each hot query at the start of a data set and deep in it.

    python -m benchmarks.scale [--sessions 200000] [--events 2000000] [--tenants 64]
                               [--leases 3000] [--backlog 500000] [--repeat 15] [--smoke]

Uses KEEL_DATABASE_URL when set, else an embedded PostgreSQL in a temporary directory. The data
set is built directly in SQL (INSERT … SELECT over generate_series: a fixture, not the commit
path): half of the sessions belong to one large tenant, the rest are spread over the others; one
session in ten has no events, the others share the events; every session with events has a run
(one in twenty pending, the rest done) and caught-up states in every live projection; a hundred
recently committed sessions, ten of them behind, give the reconcile something to find.

The baseline of every query is measured in the same run, at the start (a data set of its own,
built first):

- session list: the large tenant's first page vs a cursor 95% of the way through it;
- claim: with a handful of live (healthy) leases vs `--leases` of them, older than every pending
  run (a claim is released, untimed, after it is timed: pending again);
- relay fetch / backlog: shard 0 of 4 with a small backlog in the other shards vs `--backlog`
  rows of theirs, older than this shard's;
- reconcile scan: a data set of 1% (at least 5,000 sessions) vs the whole one.

Each figure is the median of `--repeat` runs after six warm-up runs (asyncpg prepares its
statements, and PostgreSQL switches a prepared statement to its generic plan after five runs,
which is the plan a long-running service executes); the start and the deep runs of a query take
turns, so that the load of a shared machine weighs on both alike. Last line: one JSON object;
each `ratio` is deep over start, and the queries hold at scale when every ratio is at most 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import asyncpg
import orjson

from benchmarks.cli import arguments
from benchmarks.servers import postgres, scratch_database
from keel_stream.projections import ALL
from keel_stream.projector.reconcile import Sweep, find_behind
from keel_stream.store import (
    Claim,
    PostgresOutbox,
    PostgresProjectionStore,
    PostgresRuns,
    connect,
    create_pool,
)
from keel_stream.store.outbox import Shard, ShardConnection
from keel_stream.store.sessions import PostgresSessions

SHARDS: Final = 4
OWN_SHARD: Final = 0
OWN_BACKLOG: Final = 1000
LIVE_SESSIONS: Final = 100
PAGE: Final = 51  # the API's default page (50) plus the row that tells there is more
BATCH: Final = 500  # the relay's default batch
WARM_UP: Final = 6
SHARD_OF: Final = "(hashtext(tenant_id)::bigint & 2147483647) % 4"

SMOKE: Final = {"sessions": 6000, "events": 30_000, "leases": 50, "backlog": 5000}

Timed = Callable[[], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Probe:
    """One timed call; `undo`, given what it returned and not timed, puts back what it changed."""

    work: Timed
    undo: Callable[[Any], Awaitable[object]] | None = None


def _sid(i: str) -> str:
    return f"'s' || lpad(({i})::text, 8, '0')"


async def _prepare(conn: asyncpg.Connection, tenants: int) -> None:
    await conn.execute("SET synchronous_commit = off")
    await conn.execute("SET maintenance_work_mem = '256MB'")
    # Skips the foreign-key triggers while the fixture is built (a superuser only).
    with contextlib.suppress(asyncpg.PostgresError):
        await conn.execute("SET session_replication_role = replica")
    await conn.execute(
        "INSERT INTO tenants (tenant_id) SELECT 't' || lpad(g::text, 3, '0')"
        " FROM generate_series(0, $1 - 1) AS g",
        tenants,
    )


async def _grow(conn: asyncpg.Connection, lo: int, hi: int, tenants: int, per: int) -> None:
    """Sessions lo..hi-1 with their events, runs and caught-up projection states."""
    await conn.execute(
        "INSERT INTO sessions (tenant_id, session_id, last_seq, created_at, last_committed_at)"
        " SELECT CASE WHEN i % 2 = 0 THEN 't000'"
        "             ELSE 't' || lpad((1 + (i / 2) % ($3::int - 1))::text, 3, '0') END,"
        f"        {_sid('i')}, CASE WHEN i % 10 = 9 THEN 0 ELSE $4::int END,"
        "        now() - interval '2 days' + make_interval(secs => i / 10.0),"
        "        now() - interval '1 day'"
        " FROM generate_series($1::int, $2::int - 1) AS i",
        lo,
        hi,
        tenants,
        per,
    )
    in_range = f"s.session_id >= {_sid('$1::int')} AND s.session_id < {_sid('$2::int')}"
    await conn.execute(
        "INSERT INTO events (tenant_id, session_id, seq, kind, payload, request_digest,"
        "                    committed_at)"
        " SELECT s.tenant_id, s.session_id, g, 'user.message', '{\"text\": \"m\"}', 'd',"
        "        now() - interval '1 day'"
        f" FROM sessions AS s, generate_series(1, s.last_seq) AS g WHERE {in_range}",
        lo,
        hi,
    )
    await conn.execute(
        "INSERT INTO runs (tenant_id, session_id, status, attempts, last_input_seq,"
        "                  read_watermark, updated_at)"
        " SELECT s.tenant_id, s.session_id, p.status, 1, s.last_seq, s.last_seq,"
        "        CASE WHEN p.status = 'pending'"
        "             THEN now() - make_interval(secs => 600 - (n % 500))"
        "             ELSE now() - interval '1 day' END"
        " FROM sessions AS s,"
        "      LATERAL (SELECT substr(s.session_id, 2)::int AS n) AS i,"
        "      LATERAL (SELECT CASE WHEN i.n % 20 = 3 THEN 'pending' ELSE 'done' END"
        "               AS status) AS p"
        f" WHERE {in_range} AND s.last_seq > 0",
        lo,
        hi,
    )
    await conn.execute(
        "INSERT INTO projection_states (projection, generation, tenant_id, session_id,"
        "                               last_seq, state)"
        " SELECT g.projection, g.generation, s.tenant_id, s.session_id, s.last_seq, '{}'"
        " FROM sessions AS s, projection_generations AS g"
        f" WHERE g.status = 'live' AND {in_range} AND s.last_seq > 0",
        lo,
        hi,
    )


async def _live(conn: asyncpg.Connection) -> None:
    """Recently committed sessions (3 events each); the projections miss the tail of ten."""
    await conn.execute(
        "INSERT INTO sessions (tenant_id, session_id, last_seq)"
        " SELECT 't001', 'live' || lpad(g::text, 4, '0'), 3 FROM generate_series(1, $1) AS g",
        LIVE_SESSIONS,
    )
    await conn.execute(
        "INSERT INTO events (tenant_id, session_id, seq, kind, payload, request_digest)"
        " SELECT tenant_id, session_id, g, 'user.message', '{}', 'd'"
        " FROM sessions, generate_series(1, 3) AS g WHERE session_id LIKE 'live%'"
    )
    await conn.execute(
        "INSERT INTO projection_states (projection, generation, tenant_id, session_id,"
        "                               last_seq, state)"
        " SELECT g.projection, g.generation, s.tenant_id, s.session_id,"
        "        CASE WHEN s.session_id < 'live0011' THEN 2 ELSE 3 END, '{}'"
        " FROM sessions AS s, projection_generations AS g"
        " WHERE g.status = 'live' AND s.session_id LIKE 'live%'"
    )
    await _touch_live(conn)


async def _touch_live(conn: asyncpg.Connection) -> None:
    """The live sessions' last commit 30 s ago (idle, and recent), whenever measured."""
    await conn.execute(
        "UPDATE events SET committed_at = now() - interval '30 seconds'"
        " WHERE tenant_id = 't001' AND session_id LIKE 'live%'"
    )
    await conn.execute(
        "UPDATE sessions SET last_committed_at = now() - interval '30 seconds'"
        " WHERE tenant_id = 't001' AND session_id LIKE 'live%'"
    )


async def _leases(conn: asyncpg.Connection, count: int) -> None:
    """Healthy leases on `count` more done runs, claimed before any pending run was queued."""
    await conn.execute(
        "UPDATE runs AS r SET status = 'running', lease_owner = 'elsewhere', lease_epoch = 1,"
        "       lease_expires_at = now() + interval '1 hour', heartbeat_at = now(),"
        "       updated_at = now() - interval '2 hours'"
        " FROM (SELECT tenant_id, session_id FROM runs WHERE status = 'done'"
        "       ORDER BY session_id DESC LIMIT $1) AS c"
        " WHERE r.tenant_id = c.tenant_id AND r.session_id = c.session_id",
        count,
    )


async def _backlog(conn: asyncpg.Connection, others: int, first_seq: int) -> None:
    """`others` rows in the other shards, then this shard's rows again (the newest ids)."""
    await conn.execute(
        "INSERT INTO outbox (tenant_id, session_id, seq)"
        " SELECT tenant_id, session_id, seq FROM events"
        f" WHERE {SHARD_OF} <> $2 AND seq >= $3 AND session_id LIKE 's%'"
        " LIMIT $1 ON CONFLICT DO NOTHING",
        others,
        OWN_SHARD,
        first_seq,
    )
    await conn.execute(f"DELETE FROM outbox WHERE {SHARD_OF} = $1", OWN_SHARD)
    await conn.execute(
        "INSERT INTO outbox (tenant_id, session_id, seq)"
        " SELECT tenant_id, session_id, seq FROM events"
        f" WHERE {SHARD_OF} = $2 AND session_id LIKE 's%' LIMIT $1",
        OWN_BACKLOG,
        OWN_SHARD,
    )


async def _vacuum(conn: asyncpg.Connection) -> None:
    for table in ("sessions", "events", "runs", "outbox", "projection_states"):
        await conn.execute(f"VACUUM ANALYZE {table}")


async def _timed_ms(probe: Probe) -> float:
    started = time.perf_counter()
    result = await probe.work()
    took = (time.perf_counter() - started) * 1000
    if probe.undo is not None:
        await probe.undo(result)
    return took


async def _medians_ms(start: Probe, deep: Probe, repeat: int) -> tuple[float, float]:
    """Both timed in turns (start first, then deep first, ...), so that a change in the load
    of the machine weighs on both alike; the medians after the warm-up runs."""
    samples: tuple[list[float], list[float]] = ([], [])
    for i in range(WARM_UP + repeat):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            took = await _timed_ms((start, deep)[which])
            if i >= WARM_UP:
                samples[which].append(took)
    return statistics.median(samples[0]), statistics.median(samples[1])


def _claim(runs: PostgresRuns) -> Probe:
    """A worker's claim (`Runs.claim`; no tenant skipped, no cap: a worker with free slots
    under the default settings), handed back untimed (`Runs.release`: pending again)."""

    async def release(claim: Claim | None) -> None:
        assert claim is not None, "the fixture always has a claimable run"
        assert await runs.release(claim), claim

    return Probe(runs.claim, release)


def _reconcile_scan(store: PostgresProjectionStore) -> Probe:
    """What the projector's reconcile reads on every tick, before it applies anything."""
    sweep = Sweep()

    async def scan() -> object:
        behind = await find_behind(store, ALL, sweep=sweep)
        assert len(behind) == 10, behind
        return behind

    return Probe(scan)


@dataclass(frozen=True, slots=True)
class Doors:
    """The store's doors the services query through, on the benchmark's database."""

    runs: PostgresRuns
    sessions: PostgresSessions
    shard: ShardConnection
    projections: PostgresProjectionStore


def _probes(doors: Doors) -> dict[str, Probe]:
    """The queries timed at the start and deep in the data set (the list has its own)."""
    return {
        "claim": _claim(doors.runs),
        "relay_fetch": Probe(lambda: doors.shard.fetch(BATCH)),
        "relay_backlog": Probe(doors.shard.backlog),
        "reconcile_scan": _reconcile_scan(doors.projections),
    }


async def _list_figures(
    conn: asyncpg.Connection, sessions: PostgresSessions, repeat: int
) -> tuple[float, float]:
    count = await conn.fetchval("SELECT count(*) FROM sessions WHERE tenant_id = 't000'")
    cursor = await conn.fetchval(
        "SELECT session_id FROM sessions WHERE tenant_id = 't000'"
        " ORDER BY session_id OFFSET $1 LIMIT 1",
        int(count * 0.95),
    )

    def page(after: str | None) -> Probe:
        async def fetch() -> object:
            rows = await sessions.page("t000", after, PAGE)
            assert len(rows) == PAGE
            return rows

        return Probe(fetch)

    return await _medians_ms(page(None), page(cursor), repeat)


async def _build(conn: asyncpg.Connection, args: argparse.Namespace, deep: bool) -> None:
    """The start's data set (1% of the sessions, at least 5,000) or, `deep`, the whole one."""
    with_events = args.sessions - args.sessions // 10
    per = max(1, args.events // with_events)
    first = min(args.sessions, max(5000, args.sessions // 100))
    await _prepare(conn, args.tenants)
    await _grow(conn, 0, first, args.tenants, per)
    await _live(conn)
    await _leases(conn, 5)
    await _backlog(conn, OWN_BACKLOG, 1)
    if deep:
        await _grow(conn, first, args.sessions, args.tenants, per)
        await _leases(conn, args.leases - 5)
        await _backlog(conn, args.backlog, 2)
    await _vacuum(conn)


@contextlib.asynccontextmanager
async def _data_set(dsn: str) -> AsyncIterator[tuple[asyncpg.Connection, Doors]]:
    """A scratch database, a connection to build it, and the store's doors to it."""
    async with scratch_database(dsn) as bench_dsn:
        conn = await connect(bench_dsn)
        pool = await create_pool(bench_dsn, min_size=1, max_size=3)
        try:
            async with PostgresOutbox(pool).shard(Shard(OWN_SHARD, SHARDS)) as shard:
                yield (
                    conn,
                    Doors(
                        runs=PostgresRuns(pool, "bench-worker", lease_ttl_s=30.0),
                        sessions=PostgresSessions(pool),
                        shard=shard,
                        projections=PostgresProjectionStore(pool),
                    ),
                )
        finally:
            await pool.close()
            await conn.close()


async def _run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    async with _data_set(dsn) as (small, at_start), _data_set(dsn) as (big, deep_in):
        await _build(small, args, deep=False)
        await _build(big, args, deep=True)
        built_s = time.perf_counter() - started
        await _touch_live(small)
        await _touch_live(big)
        start: dict[str, float] = {}
        deep: dict[str, float] = {}
        for name, probe in _probes(at_start).items():
            start[name], deep[name] = await _medians_ms(probe, _probes(deep_in)[name], args.repeat)
        start["list_sessions"], deep["list_sessions"] = await _list_figures(
            big, deep_in.sessions, args.repeat
        )
        events = await big.fetchval("SELECT count(*) FROM events")
    return {"start": start, "deep": deep, "built_s": built_s, "events": events}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sessions", type=int, default=200_000)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--tenants", type=int, default=64)
    parser.add_argument("--leases", type=int, default=3000)
    parser.add_argument("--backlog", type=int, default=500_000)
    parser.add_argument("--repeat", type=int, default=15)
    args = arguments(parser, SMOKE)
    with postgres() as dsn:
        figures = asyncio.run(_run(dsn, args))
    ratios = {}
    for name in ("list_sessions", "claim", "relay_fetch", "relay_backlog", "reconcile_scan"):
        start, deep = figures["start"][name], figures["deep"][name]
        ratios[name] = round(deep / start, 2)
        print(f"{name:<15} start {start:9.3f} ms   deep {deep:9.3f} ms   ratio {ratios[name]:6.2f}")
    result = {
        "sessions": args.sessions,
        "events": figures["events"],
        "leases": args.leases,
        "backlog": args.backlog,
        "build_s": round(figures["built_s"], 1),
        "start_ms": {k: round(v, 3) for k, v in figures["start"].items()},
        "deep_ms": {k: round(v, 3) for k, v in figures["deep"].items()},
        "ratios": ratios,
        "max_ratio": max(ratios.values()),
        "holds_at_scale": all(r <= 2 for r in ratios.values()),
    }
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
