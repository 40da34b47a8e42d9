"""SSE fan-out: commit-to-client latency with many concurrent streams on one api process.

    python -m benchmarks.sse [--clients 500] [--sessions 100] [--events 5]

The api runs as its own process (`keel-stream api`, live path: PostgreSQL NOTIFY + the ledger),
so `api_peak_rss_mb` is its own. Each of `--events` rounds commits one event in every session;
latency is from the event's committedAt to its frame reaching a client. Baseline, in the same
run: the same clients reading a bare in-process SSE broadcast (a minimal ASGI app pushing the
same frames to per-connection queues), timed from the push. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import time
from collections.abc import AsyncIterator
from datetime import datetime

import httpx
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

from benchmarks.servers import postgres, scratch_database
from keel_stream.kafka.broker import free_port
from keel_stream.kernel import CommitRequest
from keel_stream.store import PostgresLedger, create_pool
from keel_stream.store.keys import KeyStore


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def read_stream(
    client: httpx.AsyncClient, url: str, expected: int, latencies: list[float], ready: asyncio.Event
) -> None:
    """Read frames until `expected` events arrived; latency from the frame's own timestamp."""
    got = 0
    async with client.stream("GET", url) as response:
        ready.set()
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = orjson.loads(line[6:])
            stamp = data.get("committedAt") or data.get("sentAt")
            latencies.append(time.time() - datetime.fromisoformat(stamp).timestamp())
            got += 1
            if got >= expected:
                return


async def run_clients(
    base: str, headers: dict[str, str], paths: list[str], expected: int
) -> tuple[list[float], list[asyncio.Task[None]]]:
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=len(paths) + 10)
    client = httpx.AsyncClient(base_url=base, headers=headers, timeout=120, limits=limits)
    readies = [asyncio.Event() for _ in paths]
    tasks = [
        asyncio.create_task(read_stream(client, path, expected, latencies, ready))
        for path, ready in zip(paths, readies, strict=True)
    ]
    await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 120)
    return latencies, tasks


async def api_run(args: argparse.Namespace, dsn: str) -> tuple[list[float], float]:
    async with scratch_database(dsn) as db:
        pool = await create_pool(db, max_size=4)
        ledger = PostgresLedger(pool)
        await ledger.create_tenant("bench")
        _, key = await KeyStore(pool).create("bench")
        sessions = [await ledger.create_session("bench", f"s{i}") for i in range(args.sessions)]
        port = free_port()
        api = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "keel_stream", "api", "--port", str(port),
            env={**os.environ, "KEEL_DATABASE_URL": db, "KEEL_LOG_LEVEL": "warning"},
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base) as probe:
            for _ in range(200):
                try:
                    if (await probe.get("/healthz")).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
        paths = [
            f"/v1/sessions/{sessions[i % len(sessions)]}/events/stream" for i in range(args.clients)
        ]
        latencies, tasks = await run_clients(
            base, {"Authorization": f"Bearer {key}"}, paths, args.events
        )
        for round_ in range(args.events):
            await asyncio.gather(
                *(
                    ledger.commit(
                        CommitRequest(
                            tenant_id="bench",
                            session_id=s,
                            kind="user.message",
                            payload={"text": f"round {round_}"},
                        )
                    )
                    for s in sessions
                )
            )
            await asyncio.sleep(0.2)
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
        rss = peak_rss_mb(api.pid)
        api.send_signal(signal.SIGTERM)
        await asyncio.wait_for(api.wait(), 30)
        await pool.close()
    return latencies, rss


def peak_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:  # noqa: PTH123
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def baseline_run(args: argparse.Namespace) -> list[float]:
    """The same clients on a bare broadcast: no database, no auth, no seq bookkeeping."""
    queues: dict[str, list[asyncio.Queue[bytes]]] = {}

    async def stream(request: Request) -> StreamingResponse:
        queue: asyncio.Queue[bytes] = asyncio.Queue()
        queues.setdefault(request.path_params["sid"], []).append(queue)

        async def body() -> AsyncIterator[bytes]:
            while True:
                yield await queue.get()

        return StreamingResponse(body(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/s/{sid}", stream)])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    serving = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.05)
    sessions = [f"s{i}" for i in range(args.sessions)]
    paths = [f"/s/{sessions[i % len(sessions)]}" for i in range(args.clients)]
    latencies, tasks = await run_clients(f"http://127.0.0.1:{port}", {}, paths, args.events)
    for round_ in range(args.events):
        for sid in sessions:
            stamp = datetime.now().astimezone().isoformat()
            data = orjson.dumps({"sentAt": stamp, "text": f"round {round_}"})
            frame = b"id: " + str(round_ + 1).encode() + b"\nevent: user.message\ndata: " + data
            for queue in queues.get(sid, []):
                queue.put_nowait(frame + b"\n\n")
        await asyncio.sleep(0.2)
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    server.should_exit = True
    await serving
    return latencies


async def run(args: argparse.Namespace, dsn: str) -> dict[str, object]:
    api_latencies, rss = await api_run(args, dsn)
    base_latencies = await baseline_run(args)
    api_p50 = statistics.median(api_latencies) * 1000
    base_p50 = statistics.median(base_latencies) * 1000
    return {
        "clients": args.clients,
        "sessions": args.sessions,
        "frames": len(api_latencies),
        "p50_ms": round(api_p50, 2),
        "p99_ms": round(percentile(api_latencies, 0.99) * 1000, 2),
        "baseline_p50_ms": round(base_p50, 2),
        "baseline_p99_ms": round(percentile(base_latencies, 0.99) * 1000, 2),
        "p50_ratio_vs_broadcast": round(api_p50 / base_p50, 2) if base_p50 else None,
        "api_peak_rss_mb": round(rss, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=500)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--events", type=int, default=5, help="events per session")
    args = parser.parse_args()
    with postgres() as dsn:
        result = asyncio.run(run(args, dsn))
    print(
        f"api: p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms over {result['frames']} frames"
    )
    print(f"bare broadcast: p50 {result['baseline_p50_ms']} ms, p99 {result['baseline_p99_ms']} ms")
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
