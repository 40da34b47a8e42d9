"""External sessions through the gateway against the reference sidecar talked to directly.

    python -m benchmarks.gateway [--turns N] [--sessions S] [--smoke]

The baseline drives the reference sidecar (stdio) with the bare protocol client: per turn one
``message.send`` with ``wait: true``; S sessions run concurrently, turns in order within each.
The gateway run sends the same turns through ``ExternalAgents`` (input recorded, delivered,
every backend event committed as an external.event) and waits until each turn's
``turn.finished`` is in the ledger.  Also printed: how long after a SIGKILL of the sidecar its
sessions are marked backend-unavailable.  Uses KEEL_DATABASE_URL when set, else an embedded
PostgreSQL.  Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import sys
import time
from typing import Final

import orjson

from benchmarks.cli import arguments
from benchmarks.servers import postgres, scratch_database
from keel_stream.gateway.agents import ExternalAgents
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.event_rate import EventLimits
from keel_stream.gateway.protocol import ProviderKind
from keel_stream.gateway.transport import StdioTransport
from keel_stream.store import PostgresLedger, create_pool
from keel_stream.store.external_sessions import PostgresExternalSessions
from keel_stream.store.protocol import ExternalStatus
from keel_stream.tenancy.document import parse_config

SIDECAR = [sys.executable, "-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent"]
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


async def _baseline(turns: int, sessions: int) -> float:
    client = GatewayClient(StdioTransport(SIDECAR, ENV), ProviderKind.AGENT)
    await client.start()
    try:
        await client.initialize()
        refs = [(await client.open_session()).session_id for _ in range(sessions)]

        async def one_session(ref: str) -> None:
            for index in range(turns // sessions):
                await client.send_message(ref, f"turn {index}", wait=True)

        started = time.perf_counter()
        await asyncio.gather(*(one_session(ref) for ref in refs))
        return time.perf_counter() - started
    finally:
        await client.aclose()


async def _gateway(dsn: str, turns: int, sessions: int) -> tuple[float, float]:
    pool = await create_pool(dsn, max_size=8)
    ledger, store = PostgresLedger(pool), PostgresExternalSessions(pool)
    boot = parse_config({
        "external": {
            "backends": {"ref": {"transport": "stdio", "command": SIDECAR[0], "args": SIDECAR[1:]}},
            "quota": {"unmetered": "deny"},
        }
    })  # fmt: skip
    # The tenant's event rate is a policy, not a cost: set above anything this run reaches, so
    # the figure is the gateway's (the default held it to 1,000 events/s, about 200 turns/s).
    unbounded = EventLimits(per_second=1_000_000)
    agents = ExternalAgents(ledger, store, None, boot, environ=ENV, event_limits=unbounded)
    try:
        await ledger.create_tenant("bench")
        ids = [await agents.open("bench", None, "ref") for _ in range(sessions)]
        markers = ("ref", None, ExternalStatus.ACTIVE.value)

        async def one_session(session: str) -> None:
            for index in range(turns // sessions):
                await agents.send("bench", session, markers, {"text": f"turn {index}"}, f"r{index}")
                await _until_finished(ledger, session, index + 1)

        started = time.perf_counter()
        await asyncio.gather(*(one_session(session) for session in ids))
        elapsed = time.perf_counter() - started
        return elapsed, await _detection_s(agents, store)
    finally:
        await agents.stop()
        await pool.close()


async def _until_finished(ledger: PostgresLedger, session: str, count: int) -> None:
    while True:
        events = await ledger.read_events("bench", session, limit=1000)
        if sum(1 for e in events if e.payload.get("type") == "turn.finished") >= count:
            return
        await asyncio.sleep(0.002)


async def _detection_s(agents: ExternalAgents, store: PostgresExternalSessions) -> float:
    (backend,) = agents._backends.values()
    transport = backend.connection.client.transport if backend.connection.client else None
    assert isinstance(transport, StdioTransport)
    assert transport.pgid is not None
    os.killpg(transport.pgid, signal.SIGKILL)
    killed = time.perf_counter()
    while any(item.status == ExternalStatus.ACTIVE for item in await store.live("ref")):
        await asyncio.sleep(0.002)
    return time.perf_counter() - killed


async def _run(dsn: str, turns: int, sessions: int) -> dict[str, float]:
    baseline_s = await _baseline(turns, sessions)
    async with scratch_database(dsn) as bench_dsn:
        gateway_s, detection_s = await _gateway(bench_dsn, turns, sessions)
    return {"baseline_s": baseline_s, "gateway_s": gateway_s, "detection_s": detection_s}


SMOKE: Final = {"turns": 10, "sessions": 2}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--sessions", type=int, default=10)
    args = arguments(parser, SMOKE)
    with postgres() as dsn:
        timings = asyncio.run(_run(dsn, args.turns, args.sessions))
    gateway_rate = args.turns / timings["gateway_s"]
    baseline_rate = args.turns / timings["baseline_s"]
    print(f"gateway turns (recorded): {gateway_rate:8.0f} turns/s")
    print(f"bare protocol turns:      {baseline_rate:8.0f} turns/s")
    print(f"crash -> unavailable:     {timings['detection_s'] * 1000:8.1f} ms")
    result = {
        "turns": args.turns,
        "sessions": args.sessions,
        "gateway_turns_per_s": round(gateway_rate, 1),
        "baseline_turns_per_s": round(baseline_rate, 1),
        "crash_to_unavailable_ms": round(timings["detection_s"] * 1000, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "ratio_vs_bare_protocol": round(gateway_rate / baseline_rate, 3),
    }
    print(orjson.dumps(result).decode())


if __name__ == "__main__":
    main()
