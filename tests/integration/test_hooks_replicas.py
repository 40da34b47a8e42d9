"""Two hooks processes (`keel-stream hooks run`): their dispatchers share the consumer group and
their senders the delivery queue under leases. While both run, no delivery is sent twice; one is
SIGKILLed under steady commits, and the other delivers every hook event (the dead one's claims
once their leases end, its partitions once its group session ends)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import asyncpg
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from keel_stream.hooks import HOOK_NAMES
from keel_stream.kafka.broker import free_port
from keel_stream.relay import RelayConfig
from keel_stream.store import PostgresLedger
from keel_stream.store.service_heartbeats import ServiceKind
from tests.support.api import serve_api
from tests.support.cli import keel_process
from tests.support.hook_receiver import (
    LOOPBACK_RECEIVERS,
    Expected,
    HookReceiver,
    conversed,
    tenant_document,
)
from tests.support.kafka import KafkaServer
from tests.support.ledger import converse
from tests.support.relays import relay_task
from tests.support.wait import wait_until

SESSIONS: Final = ["s0", "s1", "s2", "s3", "s6", "s14"]
"""One session on each partition of the events topic: both dispatchers have some."""
CONCURRENCY: Final = 16
"""Deliveries one sender has in flight at most: what a SIGKILL can leave sent and unrecorded."""
LEASE_S: Final = 2.0 + 30.0
"""A claim's lease: the attempt's timeout (KEEL_HOOKS_TIMEOUT_S) and the sender's margin."""


@dataclass
class HooksProcess:
    process: asyncio.subprocess.Process
    metrics_port: int

    async def counted(self, sample: str, **labels: str) -> float:
        """A counter's value on the process's /metrics (0 before its first count)."""
        async with httpx.AsyncClient(timeout=10) as client:
            text = (await client.get(f"http://127.0.0.1:{self.metrics_port}/metrics")).text
        return sum(
            s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
        )

    async def delivers_and_dispatches(self) -> bool:
        delivered = await self.counted("keel_hooks_attempts_total", outcome="delivered")
        return delivered > 0 and await self.counted("keel_hooks_dispatched_total") > 0


@contextlib.asynccontextmanager
async def hooks_processes(
    database_dsn: str, bootstrap: str, prefix: str, logs: Path
) -> AsyncIterator[list[HooksProcess]]:
    ports = free_port(), free_port()
    env = {
        "KEEL_DATABASE_URL": database_dsn,
        "KEEL_KAFKA_BOOTSTRAP": bootstrap,
        "KEEL_TOPIC_PREFIX": prefix,
        "KEEL_HOOKS_ALLOWED_HOSTS": "127.0.0.1",
        "KEEL_HOOKS_POLL_INTERVAL_S": "0.1",
        "KEEL_HOOKS_TIMEOUT_S": "2",
        "KEEL_HOOKS_RETRY_BASE_S": "0.5",
        "KEEL_HOOKS_CONCURRENCY": str(CONCURRENCY),
        "KEEL_KAFKA_SESSION_TIMEOUT_S": "6",
    }
    async with (
        keel_process(
            "hooks", "run", env={**env, "KEEL_METRICS_PORT": str(ports[0])}, log=logs / "a.log"
        ) as a,
        keel_process(
            "hooks", "run", env={**env, "KEEL_METRICS_PORT": str(ports[1])}, log=logs / "b.log"
        ) as b,
    ):
        yield [HooksProcess(a, ports[0]), HooksProcess(b, ports[1])]


async def converse_until(
    ledger: PostgresLedger, pool: asyncpg.Pool, stop: asyncio.Event
) -> Expected:
    """A turn in every session per round until stop; the hook events of what was committed."""
    expected: Expected = {}
    rounds = 0
    while not stop.is_set():
        await asyncio.gather(*(converse(ledger, pool, s, 1, start=rounds) for s in SESSIONS))
        for session in SESSIONS:
            expected |= conversed(session, 1, start=rounds)
        rounds += 1
        await asyncio.sleep(0.1)
    return expected


async def test_two_hooks_processes_send_each_delivery_once_and_one_survives_the_others_kill(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, kafka: KafkaServer,
    topic_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("KEEL_HOOKS_ALLOWED_HOSTS", "127.0.0.1")  # the API's settings
    receiver = await HookReceiver().start()
    stop = asyncio.Event()
    try:
        async with serve_api(database_dsn) as api, api.client() as client:
            await tenant_document(database_dsn, "acme", LOOPBACK_RECEIVERS)
            body = {"url": receiver.url, "events": list(HOOK_NAMES)}
            created = await client.post("/v1/hooks", json=body)
            assert created.status_code == 201, created.text
            receiver.secrets.append(created.json()["secret"])
        for session in SESSIONS:
            await ledger.create_session("acme", session)
        relay = RelayConfig(database_dsn, kafka.settings, topic_prefix, poll_interval_s=0.1)
        args = (database_dsn, kafka.bootstrap, topic_prefix, tmp_path)
        async with relay_task(relay), hooks_processes(*args) as (victim, survivor):

            async def both_beat() -> bool:
                beating = await pool.fetchval(
                    "SELECT count(*) FROM service_heartbeats WHERE kind = $1",
                    str(ServiceKind.HOOKS_SENDER),
                )
                return bool(beating == 2)

            await wait_until(both_beat, 60, "both hooks processes to run")
            writing = asyncio.create_task(converse_until(ledger, pool, stop))
            try:

                async def both_at_work() -> bool:
                    with contextlib.suppress(httpx.HTTPError):
                        return all([await p.delivers_and_dispatches() for p in (victim, survivor)])
                    return False

                await wait_until(both_at_work, 60, "both processes dispatching and delivering")
                victim.process.kill()
                await victim.process.wait()
                before = receiver.counts()
                at_kill = len(receiver.accepted)
                await wait_until(lambda: received(receiver, at_kill + 40), 60, "the survivor")
            finally:
                stop.set()
                expected = await writing

            async def everything() -> bool:
                return set(receiver.counts()) >= set(expected)

            await wait_until(everything, LEASE_S + 60, "every hook event at the receiver", 0.2)
            assert survivor.process.returncode is None
    finally:
        await receiver.stop()
    assert max(before.values()) == 1, "while both ran, no delivery was sent twice"
    counts = receiver.counts()
    assert set(counts) == set(expected), "nothing but the derived hook events"
    twice = sum(n - 1 for n in counts.values())
    assert twice <= CONCURRENCY, "only what the killed sender had in flight is sent again"
    assert receiver.refused == []
    print(f"{len(expected)} hook events, {twice} sent again after the SIGKILL")


async def received(receiver: HookReceiver, at_least: int) -> bool:
    return len(receiver.accepted) >= at_least
