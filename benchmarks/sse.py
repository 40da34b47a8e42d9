"""SSE fan-out: commit-to-client latency of 500 streams on one api process, clients elsewhere.

    python -m benchmarks.sse [--clients 500] [--sessions 100] [--events 5] [--warmup 1]
                             [--interval 0.2] [--client-procs 4] [--runs 3] [--profile DIR]
                             [--smoke]

Processes: PostgreSQL; the api (`keel-stream api`, live path PostgreSQL NOTIFY + the ledger, no
broker); `--client-procs` client processes holding the streams, spread over the sessions (plain
asyncio HTTP/1.1: chunked decoding, one JSON parse per frame); and this one, which commits one
event in every session per round, a round every `--interval` s (100 sessions every 0.2 s: 500
commits/s, 2,500 frames/s). Latency: from the event's committedAt (PostgreSQL's clock at the
insert) to its frame's bytes reaching a client process. The first `--warmup` rounds are not
counted (pools grow in them). `notify_p99_ms`: commit to its NOTIFY arriving in this process.

Baseline, measured the same way in the same run: the same commits, rounds and client processes,
and a bare broadcast in its own process (uvicorn's h11 and Starlette's StreamingResponse as the
api, an asyncio.Queue per connection; no database, no auth, no seq bookkeeping). This process
hands it each committed event over one TCP connection as the commit returns; it encodes the
frame once and puts it on every queue of the session.

`api_rss_mb` is sampled every round (`--events 50` is the 10x longer run: it stays flat),
`api_peak_rss_mb` is the api's VmHWM, `*_cpu_ms_per_round` each server's CPU time per round.
`--profile DIR` samples the api with py-spy while the rounds run: DIR/api-N.raw (collapsed
stacks, for any flame graph tool) and DIR/api-N.txt (its top frames, own and total).
Last line: one JSON object, the p99 ratio (api / bare broadcast) its last key.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import asyncpg
import httpx
import orjson

from benchmarks.cli import arguments
from benchmarks.servers import postgres, scratch_database
from benchmarks.sse_procs import HOST, top_frames
from keel_stream.kafka.broker import free_port
from keel_stream.kernel import CommitRequest, Event
from keel_stream.store import PostgresLedger, create_pool
from keel_stream.store.keys import PostgresKeyStore
from keel_stream.store.notifications import PostgresListener

Process = asyncio.subprocess.Process


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


# -- the client processes --


def _streams_allowed(clients: int) -> dict[str, str]:
    """One tenant and one key hold every stream here: its bounds make room for them all (the
    process's own connection cap stays what the benchmark measures against)."""
    room = str(clients + 16)
    return {"KEEL_TENANT_MAX_STREAMS": room, "KEEL_KEY_MAX_STREAMS": room}


async def start_clients(
    args: argparse.Namespace, port: int, key: str | None, paths: list[str]
) -> list[Process]:
    timeout = (args.warmup + args.events) * args.interval + 120
    spec = {"port": port, "key": key, "expected": args.events, "warmup": args.warmup}
    procs = []
    for group in range(args.client_procs):
        own = {**spec, "timeout": timeout, "paths": paths[group :: args.client_procs]}
        role = ("-m", "benchmarks.sse_procs", "clients", orjson.dumps(own).decode())
        pipe = asyncio.subprocess.PIPE
        procs.append(
            await asyncio.create_subprocess_exec(
                sys.executable, *role, stdin=pipe, stdout=pipe, limit=1 << 26
            )
        )
    for proc in procs:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 120)
        if line.strip() != b"ready":
            raise RuntimeError(f"a client process did not get its streams: {line!r}")
    return procs


async def client_latencies(procs: list[Process]) -> list[float]:
    """Every frame's latency (ms) once all arrived; the clients stay connected."""
    latencies: list[float] = []
    for proc in procs:
        assert proc.stdout is not None
        line = await proc.stdout.readline()
        if not line:
            raise RuntimeError("a client process failed")
        latencies.extend(orjson.loads(line))
    return latencies


async def close_clients(procs: list[Process]) -> None:
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.close()
    for proc in procs:
        await asyncio.wait_for(proc.wait(), 60)


# -- the rounds, the servers under test --


async def rounds(
    args: argparse.Namespace,
    publish: Callable[[int], Awaitable[object]],
    pid: int,
    clients: list[Process],
) -> dict[str, Any]:
    """Publish a round every interval; the latencies, the server's RSS (MB) after each round
    and its CPU per round (from the first measured round until the clients had every frame)."""
    loop = asyncio.get_running_loop()
    began, rss, cpu = loop.time(), [], 0.0
    for round_ in range(args.warmup + args.events):
        if round_ == args.warmup:
            cpu = cpu_s(pid)
        await publish(round_)
        rss.append(memory_mb(pid, "VmRSS"))
        await asyncio.sleep(max(0.0, began + (round_ + 1) * args.interval - loop.time()))
    latencies = await client_latencies(clients)
    cpu_ms = (cpu_s(pid) - cpu) * 1000 / args.events
    await close_clients(clients)
    return {"latencies": latencies, "rss": rss[args.warmup :], "cpu_ms": round(cpu_ms, 1)}


def memory_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def until(probe: Callable[[httpx.AsyncClient], Awaitable[bool]], port: int) -> None:
    async with httpx.AsyncClient(base_url=f"http://{HOST}:{port}") as client:
        for _ in range(600):
            try:
                if await probe(client):
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError("the server did not get ready")


async def stop(proc: Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)


@dataclass
class Scratch:
    db: str
    pool: asyncpg.Pool
    ledger: PostgresLedger
    key: str
    sessions: list[str]

    def streams(self, args: argparse.Namespace) -> list[str]:
        """The session of each stream: `--clients` streams spread evenly."""
        return [self.sessions[i % len(self.sessions)] for i in range(args.clients)]

    async def rounds(
        self,
        args: argparse.Namespace,
        pid: int,
        clients: list[Process],
        committed: Callable[[int, Event], None],
    ) -> dict[str, Any]:
        """Commit one event in every session per round; `committed` hears of each."""

        async def say(session: str, round_: int) -> None:
            payload = {"text": f"round {round_}"}
            request = CommitRequest(
                tenant_id="bench", session_id=session, kind="user.message", payload=payload
            )
            done = await self.ledger.commit(request)
            event = Event(
                tenant="bench", session=session, seq=done.seq, kind=done.kind, payload=payload,
                committed_at=done.committed_at,
            )  # fmt: skip
            committed(round_, event)

        async def one_round(round_: int) -> None:
            await asyncio.gather(*(say(session, round_) for session in self.sessions))

        return await rounds(args, one_round, pid, clients)


@contextlib.asynccontextmanager
async def scratch(args: argparse.Namespace, dsn: str) -> AsyncIterator[Scratch]:
    """A migrated database of its own with the tenant `bench`, a key and the sessions."""
    async with scratch_database(dsn) as db:
        pool = await create_pool(db, max_size=10)
        try:
            ledger = PostgresLedger(pool)
            await ledger.create_tenant("bench")
            _, key = await PostgresKeyStore(pool).create("bench")
            sessions = [f"s{i}" for i in range(args.sessions)]
            for session in sessions:
                await ledger.create_session("bench", session)
            yield Scratch(db, pool, ledger, key, sessions)
        finally:
            await pool.close()


async def api_run(args: argparse.Namespace, dsn: str, profile: Path | None) -> dict[str, Any]:
    async with scratch(args, dsn) as bench:
        notified: dict[str, float] = {}
        committed: dict[str, float] = {}

        def arrived(payload: str) -> None:
            notified.setdefault(payload, time.time())

        listener = PostgresListener(bench.pool, "keel_commits", arrived)
        await listener.start()

        def note(round_: int, event: Event) -> None:
            if round_ >= args.warmup:
                committed[f"bench/{event.session}/{event.seq}"] = event.committed_at.timestamp()

        port = free_port()
        api = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "keel_stream", "api", "--port", str(port),
            env={**os.environ, "KEEL_DATABASE_URL": bench.db, "KEEL_LOG_LEVEL": "warning",
                 **_streams_allowed(args.clients)},
            stdout=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        try:
            await until(lambda c: ok(c, "/healthz"), port)
            paths = [f"/v1/sessions/{s}/events/stream" for s in bench.streams(args)]
            clients = await start_clients(args, port, bench.key, paths)
            streams = f"keel_api_sse_streams {float(len(paths))}"
            await until(lambda c: has(c, "/metrics", streams), port)
            spy = await profiler(args, api.pid, profile)
            result = await bench.rounds(args, api.pid, clients, note)
            if spy is not None and profile is not None and await spy.wait() == 0:
                profile.with_suffix(".txt").write_text(top_frames(profile))
            result["peak"] = memory_mb(api.pid, "VmHWM")
        finally:
            await stop(api)
            await listener.stop()
    notify = [(notified[k] - at) * 1000 for k, at in committed.items() if k in notified]
    return {**result, "notify_p99_ms": percentile(notify, 0.99)}


async def profiler(args: argparse.Namespace, pid: int, raw: Path | None) -> Process | None:
    """py-spy sampling the api while the rounds run (attached first: attaching costs CPU)."""
    if raw is None:
        return None
    seconds = str(int((args.warmup + args.events) * args.interval) + 3)
    spy = await asyncio.create_subprocess_exec(
        Path(sys.executable).with_name("py-spy"), "record", "--pid", str(pid), "--nonblocking",
        "--rate", "250", "--format", "raw", "--duration", seconds, "--output", str(raw),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    await asyncio.sleep(1.5)
    return spy


async def ok(client: httpx.AsyncClient, path: str) -> bool:
    return (await client.get(path)).status_code == 200


async def has(client: httpx.AsyncClient, path: str, text: str) -> bool:
    return text in (await client.get(path)).text


async def broadcast_run(args: argparse.Namespace, dsn: str) -> dict[str, Any]:
    """The same commits and clients; the committing process hands each committed event to the
    bare broadcast over one TCP connection as its commit returns."""
    port, feed_port = free_port(), free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "benchmarks.sse_procs", "broadcast", f"{port},{feed_port}"
    )
    try:
        async with scratch(args, dsn) as bench:
            await until(lambda c: ok(c, "/count"), port)
            paths = [f"/s/{s}" for s in bench.streams(args)]
            clients = await start_clients(args, port, None, paths)
            await until(lambda c: has(c, "/count", f"streams {len(paths)}\n"), port)
            _, feed = await asyncio.open_connection(HOST, feed_port)

            def forward(_: int, event: Event) -> None:
                feed.write(orjson.dumps(event.model_dump(mode="json")) + b"\n")

            result = await bench.rounds(args, server.pid, clients, forward)
            feed.close()
    finally:
        await stop(server)
    return result


# -- figures --


def figures(api: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    rss: list[float] = api["rss"]
    api_p99, base_p99 = percentile(api["latencies"], 0.99), percentile(base["latencies"], 0.99)
    return {
        "frames": len(api["latencies"]),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "notify_p99_ms": api["notify_p99_ms"],
        "p50_ms": round(statistics.median(api["latencies"]), 1),
        "p99_ms": api_p99,
        "max_ms": percentile(api["latencies"], 1.0),
        "baseline_p50_ms": round(statistics.median(base["latencies"]), 1),
        "baseline_p99_ms": base_p99,
        "api_cpu_ms_per_round": api["cpu_ms"],
        "baseline_cpu_ms_per_round": base["cpu_ms"],
        "api_rss_mb": [round(rss[i], 1) for i in (0, len(rss) // 2, len(rss) - 1)],
        "api_peak_rss_mb": round(api["peak"], 1),
        "p99_ratio_vs_broadcast": round(api_p99 / base_p99, 2) if base_p99 else None,
    }


async def benchmark(args: argparse.Namespace, dsn: str) -> list[dict[str, Any]]:
    results = []
    for run in range(args.runs):
        profile = args.profile / f"api-{run + 1}.raw" if args.profile else None
        api = await api_run(args, dsn, profile)
        result = figures(api, await broadcast_run(args, dsn))
        print(
            f"run {run + 1}: api p50 {result['p50_ms']} / p99 {result['p99_ms']} ms (commit to "
            f"NOTIFY p99 {result['notify_p99_ms']}), bare broadcast p50 "
            f"{result['baseline_p50_ms']} / p99 {result['baseline_p99_ms']} ms; cpu per round "
            f"{result['api_cpu_ms_per_round']} / {result['baseline_cpu_ms_per_round']} ms; api "
            f"rss {result['api_rss_mb']} MB (peak {result['api_peak_rss_mb']}), load "
            f"{result['load_avg_1m']}",
            flush=True,
        )
        results.append(result)
    return results


SMOKE: Final = {"clients": 10, "sessions": 5, "events": 2, "client_procs": 1, "runs": 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=500, help="streams, spread over sessions")
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--events", type=int, default=5, help="measured rounds")
    parser.add_argument("--warmup", type=int, default=1, help="rounds not measured")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between rounds")
    parser.add_argument("--client-procs", type=int, default=4)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--profile", type=Path, default=None, help="py-spy output directory")
    args = arguments(parser, SMOKE)
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    with postgres() as dsn:
        results = asyncio.run(benchmark(args, dsn))
    last = {"clients": args.clients, "sessions": args.sessions, "events": args.events}
    for key in ("p99_ms", "baseline_p99_ms", "api_peak_rss_mb", "p99_ratio_vs_broadcast"):
        last[f"runs_{key}"] = [r[key] for r in results]
    print(orjson.dumps({**last, **results[-1]}).decode())


if __name__ == "__main__":
    main()
