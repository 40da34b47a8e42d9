"""Chaos: steady input through the API while services are SIGKILLed, the broker is stopped and
PostgreSQL restarts; nothing acknowledged may be lost, duplicated or left unanswered.

    python -m benchmarks.chaos [--sessions 100] [--interval 5] [--baseline 30] [--chaos 180]
                               [--kill-every 4] [--broker-down 30] [--kafka auto|embedded]
                               [--smoke]

Each service (`keel-stream api`, `relay`, `projections run`, `worker`) runs as its own process
under a small supervisor that restarts it 1 s after it exits, on an embedded PostgreSQL and
Apache Kafka from Maven with a durable log directory (the memory-only embedded broker when Java
or Maven is missing, said in the output). `--sessions` clients each post one input every
`--interval` seconds with a requestId of their own, retried with the same requestId until
acknowledged, and read the answers over SSE (the fake provider answers). The run has two phases:
`--baseline` seconds without faults, then `--chaos` seconds during which a service is SIGKILLed
every `--kill-every` seconds (taking turns), the broker is stopped for `--broker-down` seconds
(at a fifth of the phase) and PostgreSQL is restarted once (at three fifths). Then no new input;
the run waits (bounded) for every acknowledged input's answer in the transcript read model,
counts lost / duplicated / unanswered inputs (benchmarks.chaos_audit) and runs
`keel-stream verify` (ledger = topic = read models). Figures: inputs acknowledged, lost,
duplicated, unanswered, the longest outage a client saw, p50/p99 input→answer in each phase and
the chaos/baseline ratio. Last line: one JSON object. Logs stay in the printed directory.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import orjson

from benchmarks.chaos_audit import Audit, Verified, settle, verify
from benchmarks.chaos_cluster import Cluster, Servers
from benchmarks.chaos_faults import FaultLog, broker_stop, kill_loop, postgres_restart
from benchmarks.chaos_load import Load
from benchmarks.cli import arguments

__all__ = ["ChaosParams", "ChaosResult", "main", "run_chaos"]


@dataclass(frozen=True)
class ChaosParams:
    sessions: int = 100
    interval_s: float = 5.0
    baseline_s: float = 30.0
    chaos_s: float = 180.0
    kill_every_s: float = 4.0
    restart_after_s: float = 1.0
    broker_down_s: float = 30.0
    settle_s: float = 180.0
    kafka: str = "auto"
    seed: int = 7


@dataclass
class ChaosResult:
    params: ChaosParams
    root: Path
    broker: str
    audit: Audit
    verified: Verified
    faults: FaultLog
    load: Load
    crashes: list[dict[str, Any]]
    services_up: bool
    settle_s: float
    steps: dict[str, float]

    def latencies(self, phase: str) -> list[float]:
        return sorted(
            max(0.0, session.answered[item.seq] - item.acked_at)
            for session in self.load.sessions
            for item in session.inputs
            if item.phase == phase
            and item.seq is not None
            and item.acked_at is not None
            and item.seq in session.answered
        )

    @property
    def max_outage(self) -> tuple[float, float, tuple[str, ...]]:
        worst = max(self.load.sessions, key=lambda s: s.outage[0], default=None)
        return (*worst.outage, worst.outage_errors) if worst else (0.0, 0.0, ())

    def client_errors(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for session in self.load.sessions:
            total.update(session.failures)
        return dict(total.most_common())

    def figures(self) -> dict[str, Any]:
        base, chaos = self.latencies("baseline"), self.latencies("chaos")
        base_p99, chaos_p99 = percentile(base, 0.99), percentile(chaos, 0.99)
        outage, outage_at, outage_errors = self.max_outage
        return {
            "broker": self.broker,
            "sessions": self.params.sessions,
            "acknowledged": self.audit.acknowledged,
            "sessions_acknowledged_under_chaos": sum(
                any(item.phase == "chaos" and item.seq is not None for item in session.inputs)
                for session in self.load.sessions
            ),
            "lost": len(self.audit.lost),
            "duplicated": len(self.audit.duplicated),
            "unanswered": len(self.audit.unanswered) + len(self.audit.missing_from_transcript),
            "unacknowledged": len(self.audit.unacknowledged),
            "max_outage_s": round(outage, 2),
            "max_outage_began_s": round(outage_at, 1),
            "max_outage_errors": list(outage_errors),
            "client_errors": self.client_errors(),
            "baseline_p50_ms": _ms(percentile(base, 0.5)),
            "baseline_p99_ms": _ms(base_p99),
            "chaos_p50_ms": _ms(percentile(chaos, 0.5)),
            "chaos_p99_ms": _ms(chaos_p99),
            "p99_ratio_vs_baseline": round(chaos_p99 / base_p99, 1) if base_p99 else None,
            "kills": self.faults.kills_by_service(),
            "broker_stop": self.faults.broker_stop,
            "postgres_restart": self.faults.postgres_restart,
            "crashes": self.crashes,
            "crashes_after_faults": sum(c["at_s"] > self.faults.ended for c in self.crashes),
            "services_up": self.services_up,
            "settle_s": round(self.settle_s, 1),
            "verify": _verdict(self.verified),
            "steps_s": self.steps,
        }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def _verdict(verified: Verified) -> str:
    if not verified.available:
        return "unavailable"
    return "passed" if verified.passed else "failed"


async def _chaos_phase(cluster: Cluster, load: Load, params: ChaosParams) -> FaultLog:
    load.phase = "chaos"
    cluster.epoch = load.epoch = time.monotonic()
    log = FaultLog(started=cluster.epoch)
    stop = asyncio.Event()
    killing = asyncio.create_task(
        kill_loop(cluster, params.kill_every_s, stop, random.Random(params.seed), log)
    )
    try:
        await asyncio.gather(
            asyncio.sleep(params.chaos_s),
            broker_stop(cluster, params.chaos_s * 0.2, params.broker_down_s, log),
            postgres_restart(cluster, params.chaos_s * 0.6, log),
        )  # a slow broker start may outlast the phase: the kills go on until it is back
    finally:
        stop.set()
        await killing
    log.ended = log.now()
    return log


class Steps(dict[str, float]):
    """How long each step of the run took, in seconds."""

    def __init__(self) -> None:
        super().__init__()
        self._last = time.monotonic()

    def restart(self) -> None:
        """The next step's time counts from now (what came between is counted elsewhere)."""
        self._last = time.monotonic()

    def mark(self, step: str) -> None:
        now = time.monotonic()
        self[step] = round(now - self._last, 1)
        self._last = now


async def _drive(cluster: Cluster, params: ChaosParams, steps: Steps) -> ChaosResult:
    await cluster.prepare()
    cluster.start_services()
    await asyncio.gather(cluster.create_key(), cluster.wait_ready())
    load = Load(cluster.api_url, cluster.key, params.sessions, params.interval_s)
    try:
        await load.open_sessions()
        load.start()
        steps.mark("setup")
        await asyncio.sleep(params.baseline_s)
        steps.mark("baseline")
        faults = await _chaos_phase(cluster, load, params)
        steps.mark("chaos")
        await load.stop_feeding(give_up_s=params.settle_s)
        found, waited = await settle(load.client, load.sessions, params.settle_s)
        steps.mark("settle")
        verified = await verify(cluster.env)
        steps.mark("verify")
    finally:
        await load.close()
    return ChaosResult(
        params=params,
        root=cluster.root,
        broker=cluster.servers.broker_name,
        audit=found,
        verified=verified,
        faults=faults,
        load=load,
        crashes=[vars(crash) for crash in cluster.crashes],
        services_up=all(service.running for service in cluster.services.values()),
        settle_s=waited,
        steps=steps,
    )


async def run_chaos(params: ChaosParams, root: Path) -> ChaosResult:
    """Start everything under root, run both phases, audit, and stop everything again."""
    steps = Steps()
    servers = Servers(root, kafka=params.kafka)
    await asyncio.to_thread(servers.start)
    steps.mark("servers")
    cluster = Cluster(root, servers, params.restart_after_s)
    try:
        return await _drive(cluster, params, steps)
    finally:
        await cluster.close()
        await asyncio.to_thread(servers.stop)
        steps.mark("teardown")


def _fault(what: str, timing: tuple[float, float] | None) -> str:
    if timing is None:
        return f"{what}: not done"
    return f"{what} at {timing[0]} s, back after {timing[1]} s"


def report(result: ChaosResult) -> list[str]:
    """The figures as printed, one line each (times in seconds since the chaos phase began)."""
    f = result.figures()
    params = result.params
    kills = ", ".join(f"{name} {count}" for name, count in f["kills"].items())
    errors = ", ".join(f"{kind} {count}" for kind, count in f["client_errors"].items())
    crashes = [
        f"  {c['service']} exited {c['returncode']} at {c['at_s']} s: {c['last_line']}"
        for c in f["crashes"]
    ]
    verdict = [f"verify: {f['verify']}"]
    if result.verified.available:
        verdict.append(f"  {result.verified.counts()}")
    if not result.verified.available:
        verdict[0] += " (keel-stream verify is not in this build)"
    elif not result.verified.passed:
        verdict += [f"  {line}" for line in result.verified.summary()]
    return [
        f"broker: {f['broker']}",
        f"load: {f['sessions']} sessions, one input every {params.interval_s} s each; "
        f"baseline {params.baseline_s:.0f} s, then chaos {params.chaos_s:.0f} s",
        f"faults: {sum(f['kills'].values())} SIGKILLs ({kills}); "
        f"{_fault('broker stopped', result.faults.broker_stop)}; "
        f"{_fault('PostgreSQL restarted', result.faults.postgres_restart)}",
        f"crashes (exits nobody asked for, restarted by the supervisor): {len(crashes)}",
        *crashes,
        f"services up at the end: {f['services_up']}",
        f"inputs acknowledged: {f['acknowledged']} (given up: {f['unacknowledged']})",
        f"lost: {f['lost']}",
        f"duplicated: {f['duplicated']}",
        f"unanswered: {f['unanswered']} (after waiting {f['settle_s']} s)",
        f"max client-visible outage: {f['max_outage_s']} s (from {f['max_outage_began_s']} s: "
        f"{' then '.join(f['max_outage_errors']) or 'no error'})",
        f"failed attempts, retried: {errors or 'none'}",
        f"input→answer without chaos: p50 {f['baseline_p50_ms']} ms, p99 {f['baseline_p99_ms']} ms",
        f"input→answer under chaos: p50 {f['chaos_p50_ms']} ms, p99 {f['chaos_p99_ms']} ms "
        f"(p99 ratio vs baseline {f['p99_ratio_vs_baseline']})",
        *verdict,
        "steps: " + ", ".join(f"{step} {took} s" for step, took in result.steps.items()),
    ]


SMOKE: Final = {
    "sessions": 10,
    "interval": 1.0,
    "baseline": 6.0,
    "chaos": 25.0,
    "kill_every": 2.0,
    "broker_down": 5.0,
    "settle": 60.0,
}
"""About a minute: every service still SIGKILLed a few times, the broker stopped for 5 s and
PostgreSQL restarted once (tests/integration/test_chaos.py runs it and checks the figures)."""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between inputs")
    parser.add_argument("--baseline", type=float, default=30.0, help="seconds without faults")
    parser.add_argument("--chaos", type=float, default=180.0, help="seconds with faults")
    parser.add_argument("--kill-every", type=float, default=4.0)
    parser.add_argument("--broker-down", type=float, default=30.0)
    parser.add_argument("--settle", type=float, default=180.0, help="most to wait for answers")
    parser.add_argument("--kafka", choices=("auto", "embedded"), default="auto")
    parser.add_argument("--keep", action="store_true", help="keep the data and logs")
    args = arguments(parser, SMOKE)
    params = ChaosParams(
        sessions=args.sessions, interval_s=args.interval, baseline_s=args.baseline,
        chaos_s=args.chaos, kill_every_s=args.kill_every, broker_down_s=args.broker_down,
        settle_s=args.settle, kafka=args.kafka,
    )  # fmt: skip
    root = Path(tempfile.mkdtemp(prefix="keel-chaos-"))
    print(f"data and logs: {root}", flush=True)
    started = time.monotonic()
    result = asyncio.run(run_chaos(params, root))
    for line in report(result):
        print(line)
    print(f"took {time.monotonic() - started:.0f} s")
    print(orjson.dumps(result.figures()).decode())
    figures = result.figures()
    clean = not (figures["lost"] or figures["duplicated"] or figures["unanswered"])
    if clean and figures["verify"] != "failed" and not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
