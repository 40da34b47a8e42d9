"""Two API replicas behind HAProxy: one SIGKILLed while SSE clients stream through the balancer.

The platform runs for real: two `keel-stream api` processes (with the broker) behind Debian's
HAProxy, the relay and a worker (fake provider) in this process, the projector as a process.
Input is posted steadily through the balancer (a requestId per input, retried after any failure
until acknowledged); six SSE clients, two per session, one on each replica, follow the sessions.
One replica is SIGKILLed: its clients reconnect through the balancer with Last-Event-ID and,
like the other replica's undisturbed clients, see every seq of the ledger once, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import httpx

from keel_stream.dev.haproxy import HEADER, haproxy_version
from keel_stream.relay import RelayConfig
from keel_stream.store import PostgresLedger
from keel_stream.store.keys import PostgresKeyStore
from tests.support.api import read_frames
from tests.support.balancer import Balanced, api_replicas
from tests.support.kafka import KafkaServer
from tests.support.projector import projector
from tests.support.relays import relay_task
from tests.support.wait import wait_until
from tests.support.workers import settled, worker_task

SESSIONS = 3
PACE_S = 0.2
RETRY_S = 0.1
ANSWERED_S = 60
FLOWING = 6


@dataclass
class Reader:
    """An SSE client of one session that resumes with Last-Event-ID after any break."""

    session: str
    seqs: list[int] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    served_by: list[str] = field(default_factory=list)
    """The replica of each connection, in order."""
    breaks: list[str] = field(default_factory=list)
    resumed_after: list[float] = field(default_factory=list)
    """Seconds from a break to the next frame."""
    connected: asyncio.Event = field(default_factory=asyncio.Event)
    _broke_at: float | None = None

    async def run(self, balanced: Balanced, key: str) -> None:
        async with balanced.client(key) as client:
            while True:
                headers = {"Last-Event-ID": str(self.seqs[-1])} if self.seqs else {}
                path = f"/v1/sessions/{self.session}/events/stream"
                try:
                    async with client.stream("GET", path, headers=headers) as response:
                        if response.status_code == 200:
                            await self._follow(response)
                        self.breaks.append(f"status {response.status_code}")
                except httpx.HTTPError as exc:
                    self.breaks.append(type(exc).__name__)
                self._broke_at = self._broke_at or time.monotonic()
                await asyncio.sleep(RETRY_S)

    async def _follow(self, response: httpx.Response) -> None:
        self.served_by.append(response.headers[HEADER])
        self.connected.set()
        async for frame in read_frames(response):
            if frame.id is None:
                continue
            if self._broke_at is not None:
                self.resumed_after.append(time.monotonic() - self._broke_at)
                self._broke_at = None
            self.seqs.append(int(frame.id))
            self.kinds.append(str(frame.event))


@dataclass
class Feeder:
    """Posts one input every PACE_S through the balancer, each retried until acknowledged."""

    session: str
    acknowledged: list[str] = field(default_factory=list)
    failures: Counter[str] = field(default_factory=Counter)

    async def run(self, balanced: Balanced, key: str, stop: asyncio.Event) -> None:
        async with balanced.client(key, timeout_s=5) as client:
            while not stop.is_set():
                request_id = f"{self.session}-{len(self.acknowledged)}"
                await self._post(client, request_id)
                self.acknowledged.append(request_id)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), PACE_S)

    async def _post(self, client: httpx.AsyncClient, request_id: str) -> None:
        body = {"text": f"input {request_id}", "requestId": request_id}
        while True:
            try:
                answer = await client.post(f"/v1/sessions/{self.session}/input", json=body)
                if answer.status_code in (200, 201):
                    return
                self.failures[f"status {answer.status_code}"] += 1
            except httpx.HTTPError as exc:
                self.failures[type(exc).__name__] += 1
            await asyncio.sleep(RETRY_S)


@contextlib.asynccontextmanager
async def open_readers(
    balanced: Balanced, key: str, sessions: list[str]
) -> AsyncIterator[list[Reader]]:
    """Two readers per session, opened one at a time: round-robin puts one on each replica."""
    readers = [Reader(session) for session in sessions for _ in range(2)]
    tasks: list[asyncio.Task[None]] = []
    try:
        for reader in readers:
            tasks.append(asyncio.create_task(reader.run(balanced, key)))
            await asyncio.wait_for(reader.connected.wait(), 30)
        yield readers
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@dataclass
class Kill:
    victim: str
    survivor: str
    marked_down_s: float
    heads: dict[str, int]


async def kill_one_under_load(
    balanced: Balanced, key: str, pool: asyncpg.Pool, readers: list[Reader], feeders: list[Feeder]
) -> Kill:
    """Feed, SIGKILL the first reader's replica mid-stream, feed on until every reader streams
    again, stop, and wait until every run is answered and every reader is at its head."""
    stop = asyncio.Event()
    feeding = [asyncio.create_task(f.run(balanced, key, stop)) for f in feeders]
    try:
        await frames_flow(readers, "answers streaming to every reader")
        victim, survivor = readers[0].served_by[0], readers[1].served_by[0]
        balanced.apis[victim].kill()
        killed_at = time.monotonic()
        await balanced.wait_states({victim: "DOWN", survivor: "UP"}, 10)
        marked_down_s = time.monotonic() - killed_at
        await frames_flow(readers, "every reader streaming again after the kill")
    finally:
        stop.set()
        await asyncio.gather(*feeding)
    for feeder in feeders:
        await settled(pool, feeder.session, "done", timeout_s=ANSWERED_S)
    rows = await pool.fetch("SELECT session_id, last_seq FROM sessions")
    heads: dict[str, int] = {r["session_id"]: r["last_seq"] for r in rows}

    async def caught_up() -> bool:
        return all(r.seqs and r.seqs[-1] >= heads[r.session] for r in readers)

    await wait_until(caught_up, ANSWERED_S, "every reader at its session's head")
    return Kill(victim, survivor, marked_down_s, heads)


async def frames_flow(readers: list[Reader], what: str) -> None:
    """Until every reader has received FLOWING more frames than it had when this was called."""
    before = [len(r.seqs) for r in readers]

    async def more() -> bool:
        return all(len(r.seqs) >= n + FLOWING for r, n in zip(readers, before, strict=True))

    await wait_until(more, ANSWERED_S, what)


async def test_sse_clients_resume_every_seq_once_in_order_after_an_api_replica_is_sigkilled(
    database_dsn: str,
    pool: asyncpg.Pool,
    ledger: PostgresLedger,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    await ledger.create_tenant("acme")
    _, key = await PostgresKeyStore(pool).create("acme")
    env = {
        "KEEL_DATABASE_URL": database_dsn,
        "KEEL_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "KEEL_TOPIC_PREFIX": topic_prefix,
    }
    async with (
        relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix)),
        worker_task(database_dsn),
        projector(database_dsn, kafka.bootstrap, topic_prefix, tmp_path / "projector"),
        api_replicas(env, tmp_path) as balanced,
        balanced.client(key) as client,
    ):
        sessions = [(await client.post("/v1/sessions")).json()["id"] for _ in range(SESSIONS)]
        feeders = [Feeder(session) for session in sessions]
        async with open_readers(balanced, key, sessions) as readers:
            assert Counter(r.served_by[0] for r in readers) == {"api0": 3, "api1": 3}
            kill = await kill_one_under_load(balanced, key, pool, readers, feeders)

    for reader in readers:
        events = await ledger.read_events("acme", reader.session, after=0, limit=1000)
        assert reader.seqs == list(range(1, kill.heads[reader.session] + 1)), reader
        assert reader.kinds == [e.kind for e in events], "each frame is its ledger event"
        if reader.served_by[0] == kill.victim:
            assert reader.breaks, "the stream of the killed replica broke"
            assert set(reader.served_by[1:]) == {kill.survivor}, reader
        else:
            assert reader.served_by == [kill.survivor], "the other replica's streams go on"
    for feeder in feeders:
        inputs = await pool.fetch(
            "SELECT payload->>'requestId' AS id FROM events"
            " WHERE session_id = $1 AND kind = 'user.message' ORDER BY seq",
            feeder.session,
        )
        assert [row["id"] for row in inputs] == feeder.acknowledged, "each input once, in order"
    resume = sorted(s for r in readers for s in r.resumed_after)
    failures = sum((f.failures for f in feeders), Counter[str]())
    print(
        f"HAProxy {haproxy_version()}: {sum(kill.heads.values())} events over {SESSIONS} "
        f"sessions; {kill.victim} SIGKILLed, "
        f"marked down after {kill.marked_down_s:.2f}s; its streams resumed after "
        f"{resume[0]:.2f}-{resume[-1]:.2f}s; input retries {dict(failures)}"
    )
