"""Cluster chaos: the production shape on one machine, killed one engine at a time under steady
input; nothing acknowledged may be lost, duplicated, skipped on a stream or left unanswered.

    python -m benchmarks.cluster_chaos [--sessions 20] [--interval 2] [--warmup 20] [--rounds 2]
                                       [--between 10] [--broker-down 10] [--burst 10]
                                       [--burst-clients 8] [--smoke]

The topology (benchmarks.cluster_shape): three Apache Kafka brokers (KRaft, SASL/SCRAM, topics
replicated three times, two in sync), a pg_auto_failover primary with a synchronous standby
behind a multi-host DSN, two API replicas behind HAProxy, and two of every other service (two
relay shards). First a throughput burst: `--burst-clients` clients commit back to back for
`--burst` seconds. Then `--sessions` clients each post one input every `--interval` s with a
requestId of their own (retried with it until acknowledged) through the balancer and read their
session over SSE, resuming with Last-Event-ID. After `--warmup` s, in turn, `--rounds` times: a
broker is SIGKILLed (restarted after `--broker-down` s), the PostgreSQL primary is SIGKILLed
(the standby is promoted; the old primary stays down), then one replica of the API, a worker, a
projector and a relay are SIGKILLed (each restarted by the run's supervisor); `--between` s of
steady input after each. Then no new input: every acknowledged input is looked up in the ledger
and the transcript (benchmarks.chaos_audit) and `keel-stream verify` compares ledger, topic and
read models. Last, the same burst on a single node (one PostgreSQL, one broker, one of each
service: benchmarks.chaos_cluster) for the throughput ratio.

Figures: commits acknowledged, lost, duplicated (ledger and topic), SSE gaps and duplicates,
the failover's write gap (s) and promotion time, each fault's recovery per consumer (s),
throughput beside the single node. Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx
import orjson

from benchmarks.chaos import Steps, percentile
from benchmarks.chaos_audit import Audit, Verified, settle, verify
from benchmarks.chaos_cluster import Cluster, Servers
from benchmarks.chaos_load import Load
from benchmarks.cli import arguments
from benchmarks.cluster_faults import FAULTS, Fault, inflict
from benchmarks.cluster_shape import ProductionShape, engine_versions
from keel_stream.kafka.settings import CLIENT_LOGGER

__all__ = ["ClusterParams", "main", "run_cluster_chaos"]


@dataclass(frozen=True)
class ClusterParams:
    sessions: int = 20
    interval_s: float = 2.0
    warmup_s: float = 20.0
    rounds: int = 2
    between_s: float = 10.0
    broker_down_s: float = 10.0
    burst_s: float = 10.0
    burst_clients: int = 8
    restart_after_s: float = 1.0
    recovery_deadline_s: float = 90.0
    settle_s: float = 180.0


@dataclass(frozen=True)
class Burst:
    per_s: float
    p50_ms: float
    p99_ms: float


async def burst(api_url: str, key: str, clients: int, seconds: float) -> Burst:
    """Commits per second and their latency: `clients` clients, each on a session of its own
    (created, and committed to once, before the clock starts), back to back."""
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=api_url, headers=headers, timeout=30) as client:

        async def commit(session: str, number: int) -> float | None:
            body = {"kind": "user.message", "payload": {"text": f"burst {number}"}}
            body["requestId"] = f"{session}-{number}"
            started = time.monotonic()
            response = await client.post(f"/v1/sessions/{session}/events", json=body)
            return time.monotonic() - started if response.is_success else None

        stamp = time.monotonic_ns()
        ids = []
        for index in range(clients):
            made = await client.post("/v1/sessions", json={"id": f"burst-{stamp}-{index}"})
            made.raise_for_status()
            ids.append(made.json()["id"])
            await commit(ids[-1], 0)  # warm: the first commit of a session is not measured
        ends = time.monotonic() + seconds
        took: list[float] = []

        async def commit_until_end(session: str) -> None:
            number = 1
            while time.monotonic() < ends:
                latency = await commit(session, number)
                if latency is not None:
                    took.append(latency)
                    number += 1

        started = time.monotonic()
        await asyncio.gather(*(commit_until_end(s) for s in ids))
        elapsed = time.monotonic() - started
    took.sort()
    return Burst(
        per_s=round(len(took) / elapsed, 1),
        p50_ms=round(1000 * percentile(took, 0.5), 1),
        p99_ms=round(1000 * percentile(took, 0.99), 1),
    )


def _write_gap(load: Load, fault: Fault) -> float | None:
    """Seconds without a commit: from the last acknowledgement before the primary's SIGKILL to
    the first acknowledgement of an input first sent after it (an input sent before may be
    acknowledged late: it committed on the old primary, its answer was still on the way)."""
    items = [i for s in load.sessions for i in s.inputs if i.acked_at is not None]
    before = [i.acked_at for i in items if i.acked_at is not None and i.acked_at <= fault.at]
    after = [i.acked_at for i in items if i.acked_at is not None and i.first_try > fault.at]
    if not before or not after:
        return None
    return round(min(after) - max(before), 2)


@dataclass
class ClusterResult:
    params: ClusterParams
    versions: dict[str, str]
    faults: list[Fault]
    load: Load
    audit: Audit
    verified: Verified
    throughput: dict[str, Burst]
    crashes: list[dict[str, Any]]
    steps: dict[str, float]

    def topic_counts(self) -> dict[str, int]:
        try:
            counts = orjson.loads(self.verified.output).get("counts", {})
        except orjson.JSONDecodeError:
            return {}
        return {k: int(v) for k, v in counts.items() if isinstance(v, int)}

    def figures(self) -> dict[str, Any]:
        topic = self.topic_counts()
        postgres = [f for f in self.faults if f.what == "postgres"]
        gaps = [_write_gap(self.load, f) for f in postgres]
        cluster, single = self.throughput["cluster"], self.throughput.get("single")
        ratio = round(cluster.per_s / single.per_s, 2) if single and single.per_s else None
        return {
            "engines": self.versions,
            "sessions": self.params.sessions,
            "acknowledged": self.audit.acknowledged,
            "unacknowledged": len(self.audit.unacknowledged),
            "lost": len(self.audit.lost),
            "duplicated": len(self.audit.duplicated),
            "duplicated_on_topic": topic.get("duplicates"),
            "missing_on_topic": topic.get("missing"),
            "unanswered": len(self.audit.unanswered) + len(self.audit.missing_from_transcript),
            "sse_gaps": sum(s.stream_gaps for s in self.load.sessions),
            "sse_duplicates": sum(s.stream_duplicates for s in self.load.sessions),
            "failover_write_gap_s": [g for g in gaps if g is not None],
            "failover_promoted_s": [f.detail.get("promoted_s") for f in postgres],
            "faults": [f.figures() for f in self.faults],
            "throughput": {
                "cluster": vars(cluster),
                "single_node": vars(single) if single else None,
                "ratio": ratio,
            },
            "crashes": self.crashes,
            "verify": "passed" if self.verified.passed else "failed",
            "verify_counts": topic,
            "steps_s": self.steps,
        }


async def _faults(shape: ProductionShape, params: ClusterParams) -> list[Fault]:
    done: list[Fault] = []
    for _ in range(params.rounds):
        for what in FAULTS:
            fault = await inflict(
                shape,
                what,
                broker_down_s=params.broker_down_s,
                deadline_s=params.recovery_deadline_s,
            )
            print(f"fault: {orjson.dumps(fault.figures()).decode()}", flush=True)
            done.append(fault)
            await asyncio.sleep(params.between_s)
    return done


async def _on_cluster(shape: ProductionShape, params: ClusterParams, steps: Steps) -> ClusterResult:
    steps.update(await shape.start())
    steps.restart()
    versions = engine_versions(shape)
    print(f"engines: {orjson.dumps(versions).decode()}", flush=True)
    cluster_rate = await burst(shape.api_url, shape.key, params.burst_clients, params.burst_s)
    steps.mark("burst")
    load = Load(shape.api_url, shape.key, params.sessions, params.interval_s)
    try:
        await load.open_sessions()
        load.start()
        shape.epoch = load.epoch = time.monotonic()
        await asyncio.sleep(params.warmup_s)
        faults = await _faults(shape, params)
        steps.mark("faults")
        await load.stop_feeding(give_up_s=params.settle_s)
        found, _ = await settle(load.client, load.sessions, params.settle_s)
        steps.mark("settle")
        verified = await verify(shape.env)
        steps.mark("verify")
    finally:
        await load.close()
    return ClusterResult(
        params=params,
        versions=versions,
        faults=faults,
        load=load,
        audit=found,
        verified=verified,
        throughput={"cluster": cluster_rate},
        crashes=[vars(crash) for crash in shape.crashes],
        steps=steps,
    )


async def _single_node_rate(root: Path, params: ClusterParams) -> Burst:
    """The same burst on one PostgreSQL, one broker and one of each service."""
    servers = Servers(root)
    await asyncio.to_thread(servers.start)
    cluster = Cluster(root, servers, params.restart_after_s)
    try:
        await cluster.prepare()
        cluster.start_services()
        await asyncio.gather(cluster.create_key(), cluster.wait_ready())
        return await burst(cluster.api_url, cluster.key, params.burst_clients, params.burst_s)
    finally:
        await cluster.close()
        await asyncio.to_thread(servers.stop)


async def run_cluster_chaos(params: ClusterParams, root: Path) -> ClusterResult:
    """The production shape under faults, then the single node's burst."""
    steps = Steps()
    shape = ProductionShape(root / "cluster", params.restart_after_s)
    try:
        result = await _on_cluster(shape, params, steps)
    finally:
        await shape.close()
        steps.mark("teardown")
    result.throughput["single"] = await _single_node_rate(root / "single", params)
    steps.mark("single node")
    return result


async def _until_terminated(params: ClusterParams, root: Path) -> ClusterResult:
    """The run, cancelled by SIGTERM so that every engine it started is stopped on the way out
    (they run in sessions of their own: a kill of this process's group does not reach them)."""
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    return await run_cluster_chaos(params, root)


def report(result: ClusterResult) -> list[str]:
    f = result.figures()
    lines = [f"engines: {', '.join(f['engines'].values())}"]
    lines += [
        f"commits acknowledged: {f['acknowledged']} (given up: {f['unacknowledged']})",
        f"lost: {f['lost']}, duplicated: {f['duplicated']}, "
        f"on the topic: {f['duplicated_on_topic']} duplicated, {f['missing_on_topic']} missing",
        f"unanswered: {f['unanswered']}",
        f"SSE: {f['sse_gaps']} gaps, {f['sse_duplicates']} duplicates",
        f"failover: write gap {f['failover_write_gap_s']} s, "
        f"promoted after {f['failover_promoted_s']} s",
    ]
    for fault in f["faults"]:
        recovered = ", ".join(f"{k} {v}" for k, v in fault["recovery_s"].items())
        lines.append(f"  {fault['what']} at {fault['at_s']} s: recovered {recovered}")
    rate = f["throughput"]
    lines += [
        f"throughput: {rate['cluster']} on the cluster, {rate['single_node']} on one node "
        f"(ratio {rate['ratio']})",
        f"crashes: {len(f['crashes'])}",
        f"verify: {f['verify']} ({f['verify_counts']})",
        "steps: " + ", ".join(f"{k} {v} s" for k, v in f["steps_s"].items()),
    ]
    return lines


def clean(figures: dict[str, Any]) -> bool:
    """Nothing lost, duplicated, skipped or unanswered, and verify passed."""
    counted = ("lost", "duplicated", "duplicated_on_topic", "missing_on_topic", "unanswered")
    streams = ("sse_gaps", "sse_duplicates", "unacknowledged")
    return figures["verify"] == "passed" and not any(figures[k] for k in counted + streams)


SMOKE: Final = {
    "sessions": 6,
    "interval": 1.0,
    "warmup": 4.0,
    "rounds": 1,
    "between": 3.0,
    "broker_down": 3.0,
    "burst": 2.0,
    "burst_clients": 4,
    "settle": 90.0,
}
"""One kill of each engine and service, a few seconds apart (tests/integration/
test_cluster_chaos.py runs it and checks the figures)."""


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    defaults = ClusterParams()
    parser.add_argument("--sessions", type=int, default=defaults.sessions)
    parser.add_argument("--interval", type=float, default=defaults.interval_s)
    parser.add_argument("--warmup", type=float, default=defaults.warmup_s)
    parser.add_argument("--rounds", type=int, default=defaults.rounds)
    parser.add_argument("--between", type=float, default=defaults.between_s)
    parser.add_argument("--broker-down", type=float, default=defaults.broker_down_s)
    parser.add_argument("--burst", type=float, default=defaults.burst_s)
    parser.add_argument("--burst-clients", type=int, default=defaults.burst_clients)
    parser.add_argument("--settle", type=float, default=defaults.settle_s)
    parser.add_argument("--keep", action="store_true", help="keep the data and logs")
    args = arguments(parser, SMOKE)
    params = ClusterParams(
        sessions=args.sessions, interval_s=args.interval, warmup_s=args.warmup,
        rounds=args.rounds, between_s=args.between, broker_down_s=args.broker_down,
        burst_s=args.burst, burst_clients=args.burst_clients, settle_s=args.settle,
    )  # fmt: skip
    # The run's own probes meet a dead broker on purpose: its connection errors are expected.
    logging.getLogger(CLIENT_LOGGER).setLevel(logging.CRITICAL)
    root = Path(tempfile.mkdtemp(prefix="keel-cluster-chaos-"))
    print(f"data and logs: {root}", flush=True)
    started = time.monotonic()
    result = asyncio.run(_until_terminated(params, root))
    for line in report(result):
        print(line)
    print(f"took {time.monotonic() - started:.0f} s")
    figures = result.figures()
    print(orjson.dumps(figures).decode())
    if clean(figures) and not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
