"""/healthz latency while large bodies are posted: what one big request costs the event loop.

    python -m benchmarks.body_limits [--seconds 10] [--body-kib 480] [--posters 2] [--smoke]

The api runs as its own process (`keel-stream api`). A prober asks /healthz every 10 ms and
times each answer; meanwhile `--posters` clients post, back to back, a user.message whose
payload is `--body-kib` KiB of small numbers (the costliest JSON to parse and check per byte),
and one client posts bodies over the body limit (refused unread). Baseline, in the same run:
the prober alone. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from typing import Final

import httpx
import orjson

from benchmarks.cli import arguments
from benchmarks.servers import postgres, scratch_database
from keel_stream.kafka.broker import free_port
from keel_stream.store import PostgresLedger, create_pool
from keel_stream.store.keys import PostgresKeyStore


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def probe(url: str, until: float) -> list[float]:
    """/healthz latencies (ms), one request every 10 ms until the deadline."""
    latencies: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while time.monotonic() < until:
            started = time.perf_counter()
            assert (await client.get("/healthz")).status_code == 200
            latencies.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.01)
    return latencies


async def post_big(url: str, key: str, session: str, body: bytes, until: float) -> list[int]:
    statuses: list[int] = []
    headers = {"Authorization": f"Bearer {key}", "content-type": "application/json"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
        while time.monotonic() < until:
            response = await client.post(f"/v1/sessions/{session}/input", content=body)
            statuses.append(response.status_code)
    return statuses


def numbers_body(kib: int) -> bytes:
    count = kib * 1024 // 2
    return orjson.dumps({"text": "big", "numbers": [1] * count})


async def measure(
    url: str, key: str, sessions: list[str], args: argparse.Namespace
) -> dict[str, object]:
    baseline = await probe(url, time.monotonic() + args.seconds / 2)
    until = time.monotonic() + args.seconds
    body = numbers_body(args.body_kib)
    over = numbers_body(4096)
    prober = asyncio.create_task(probe(url, until))
    posted = await asyncio.gather(
        *(post_big(url, key, sessions[i], body, until) for i in range(args.posters)),
        post_big(url, key, sessions[-1], over, until),
    )
    loaded = await prober
    statuses = [s for batch in posted for s in batch]
    return {
        "body_bytes": len(body),
        "posts": len(statuses),
        "statuses": {str(s): statuses.count(s) for s in sorted(set(statuses))},
        "baseline_p50_ms": round(percentile(baseline, 0.5), 2),
        "baseline_p99_ms": round(percentile(baseline, 0.99), 2),
        "loaded_p50_ms": round(percentile(loaded, 0.5), 2),
        "loaded_p99_ms": round(percentile(loaded, 0.99), 2),
        "loaded_max_ms": round(max(loaded), 2),
        "probes": len(loaded),
    }


async def run(args: argparse.Namespace, dsn: str) -> dict[str, object]:
    async with scratch_database(dsn) as db:
        pool = await create_pool(db, max_size=2)
        ledger = PostgresLedger(pool)
        await ledger.create_tenant("bench")
        _, key = await PostgresKeyStore(pool).create("bench")
        sessions = [await ledger.create_session("bench") for _ in range(args.posters + 1)]
        await pool.close()
        port = free_port()
        api = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "keel_stream", "api", "--port", str(port)),
            env={**os.environ, "KEEL_DATABASE_URL": db, "KEEL_LOG_LEVEL": "warning"},
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            async with httpx.AsyncClient(base_url=url) as client:
                for _ in range(300):
                    try:
                        if (await client.get("/healthz")).status_code == 200:
                            break
                    except httpx.TransportError:
                        await asyncio.sleep(0.1)
            return await measure(url, key, sessions, args)
        finally:
            api.send_signal(signal.SIGTERM)
            await asyncio.wait_for(api.wait(), 30)


SMOKE: Final = {"seconds": 1.0, "body_kib": 64, "posters": 1}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--body-kib", type=int, default=480)
    parser.add_argument("--posters", type=int, default=2)
    args = arguments(parser, SMOKE)
    with postgres() as dsn:
        result = asyncio.run(run(args, dsn))
    print(
        f"/healthz p50 {result['loaded_p50_ms']} ms, p99 {result['loaded_p99_ms']} ms, max "
        f"{result['loaded_max_ms']} ms under {result['posts']} big posts (alone: p50 "
        f"{result['baseline_p50_ms']} ms, p99 {result['baseline_p99_ms']} ms)"
    )
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
