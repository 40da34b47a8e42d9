"""Relays SIGKILLed again and again under load, half the kills landing between a batch's publish
and its delete: every ledger event is on keel.events.v1 exactly once, in seq order per session,
read with a plain consumer and no de-duplication."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import socket
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from keel_stream.errors import BrokerUnavailable
from keel_stream.kafka.admin import high_water_marks
from keel_stream.kafka.apache import ApacheKafka
from keel_stream.kafka.broker import EmbeddedBroker
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import CommitRequest
from keel_stream.relay.publisher import Publisher
from keel_stream.store import PostgresLedger
from keel_stream.store.outbox import PostgresOutbox, Shard
from keel_stream.topics.catalog import EVENTS
from tests.support.kafka import KafkaServer, collect
from tests.support.ledger import commit_round_robin, make_sessions, outbox_empty
from tests.support.postgres import unique_name
from tests.support.relays import RelayFleet, RelayProcess, active_relay_pid
from tests.support.wait import wait_until

KILLS = 24
LEAD_DEADLINE_S = 60  # a hang guard: a takeover waits at most on a standby's start-up
SESSIONS = 40
WRITERS = 4
RELAY_ENV = {"KEEL_RELAY_POLL_INTERVAL_S": "0.1", "KEEL_RELAY_BATCH_SIZE": "50"}
SKIPPED_LOG = "on the topic already; not sent again"


async def commit_until(ledger: PostgresLedger, sessions: list[str], stop: asyncio.Event) -> int:
    """Commit user messages round-robin over the sessions until stop; how many."""
    counter = itertools.count()

    async def writer() -> int:
        done = 0
        while not stop.is_set():
            i = next(counter)
            request = CommitRequest(
                tenant_id="acme",
                session_id=sessions[i % len(sessions)],
                kind="user.message",
                payload={"text": f"event {i}"},
                key=f"r{i}",
            )
            await ledger.commit(request)
            done += 1
            await asyncio.sleep(0.005)  # pacing: a steady stream, not a burst
        return done

    return sum(await asyncio.gather(*(writer() for _ in range(WRITERS))))


async def deleted_so_far(pool: asyncpg.Pool) -> int:
    """Events committed and already taken out of the outbox by a relay."""
    row = await pool.fetchrow(
        "SELECT (SELECT count(*) FROM events) - (SELECT count(*) FROM outbox) AS deleted"
    )
    assert row is not None
    return int(row["deleted"])


async def leader(
    pool: asyncpg.Pool, fleet: RelayFleet, after: int, writing: asyncio.Task[int]
) -> RelayProcess:
    """The relay that holds the lock once `after` more events than now left the outbox."""
    baseline = await deleted_so_far(pool)

    async def leading_and_publishing() -> bool:
        if writing.done():  # no new events: nothing would ever leave the outbox again
            raise AssertionError("the writers stopped") from writing.exception()
        pid = await active_relay_pid(pool)
        alive = pid is not None and any(
            r.pid == pid and r.process is not None and r.process.returncode is None
            for r in fleet.relays
        )
        return alive and await deleted_so_far(pool) >= baseline + after

    try:
        await wait_until(
            leading_and_publishing, LEAD_DEADLINE_S, "a live relay to lead and publish"
        )
    except TimeoutError as exc:
        state = (
            f"lock held by {await active_relay_pid(pool)}, {await deleted_so_far(pool)} deleted"
            f" (from {baseline}, waiting for {after} more), live relays"
            f" {[r.pid for r in fleet.relays if r.process and r.process.returncode is None]}"
        )
        logs = [line.decode(errors="replace") for r in fleet.relays for line in r.lines[-5:]]
        raise AssertionError(f"no relay leads and publishes: {state}\n" + "".join(logs)) from exc
    pid = await active_relay_pid(pool)
    assert pid is not None
    return fleet.with_pid(pid)


async def kill_between_publish_and_delete(pool: asyncpg.Pool, relay: RelayProcess) -> None:
    """Hold the oldest outbox row's lock so that the relay's delete of the batch holding it
    waits (the batch is published by then: a relay deletes only what the broker acknowledged),
    SIGKILL the relay while it waits, and end its database session before letting go, so its
    delete never happens, as if the relay had died before sending it."""
    async with pool.acquire() as conn:
        me = await conn.fetchval("SELECT pg_backend_pid()")
        transaction = conn.transaction()
        await transaction.start()
        try:

            async def oldest_row_locked() -> bool:
                row = await conn.fetchval("SELECT id FROM outbox ORDER BY id LIMIT 1 FOR UPDATE")
                return row is not None

            await wait_until(oldest_row_locked, 10, "an outbox row to lock")
            waiting: list[asyncpg.Record] = []

            async def relay_waits_on_it() -> bool:
                waiting[:] = await pool.fetch(
                    "SELECT pid, application_name FROM pg_stat_activity"
                    " WHERE $1 = ANY(pg_blocking_pids(pid))",
                    me,
                )
                return bool(waiting)

            await wait_until(relay_waits_on_it, 10, "the relay's delete to wait on the row")
            ((backend, name),) = waiting
            assert name == f"keel-relay:{socket.gethostname()}:{relay.pid}", name
            await relay.kill()
            assert await pool.fetchval("SELECT pg_terminate_backend($1)", backend)
        finally:
            await transaction.rollback()


@pytest.mark.timeout(300)  # a hang guard for a run of many kills on a busy two-core machine
async def test_relays_killed_under_load_leave_every_event_on_the_topic_exactly_once(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    sessions = await make_sessions(ledger, SESSIONS)
    rng = random.Random(12)
    stop_writing = asyncio.Event()
    between = 0
    async with RelayFleet(database_dsn, kafka.bootstrap, topic_prefix, **RELAY_ENV) as fleet:
        await fleet.start()
        await fleet.start()
        writing = asyncio.create_task(commit_until(ledger, sessions, stop_writing))
        try:
            for kill in range(KILLS):
                relay = await leader(pool, fleet, rng.randint(1, 120), writing)
                if kill % 2 == 0:
                    await kill_between_publish_and_delete(pool, relay)
                    between += 1
                else:
                    await asyncio.sleep(rng.uniform(0, 0.15))  # a kill at any point
                    await relay.kill()
                await fleet.start()  # a standby to replace it
            assert not writing.done(), "commits must keep arriving while relays are killed"
        finally:
            stop_writing.set()
            committed = await writing
        await wait_until(lambda: outbox_empty(pool), 60, "the last relay to drain the outbox")
        await fleet.kill_all()
        skips = [r for r in fleet.relays if SKIPPED_LOG in r.events]
        logged = [e for r in fleet.relays for e in r.entries]
        modes = {str(e.get("mode")) for e in logged if e["event"] == "producer mode"}
        tail_reads = sorted(float(e["seconds"]) for e in logged if e["event"] == "tail read")

    topic = EVENTS.full_name(topic_prefix)
    on_topic = sum((await high_water_marks(kafka.settings, topic)).values())
    received = await collect(kafka.bootstrap, topic, lambda got: len(got) >= on_topic, 60)
    arrivals: dict[str, list[int]] = defaultdict(list)
    for record in received:
        assert record.event.tenant == "acme"
        arrivals[record.event.session].append(record.event.seq)
    heads = {
        r["session_id"]: r["last_seq"]
        for r in await pool.fetch("SELECT session_id, last_seq FROM sessions")
    }
    assert sum(heads.values()) == committed
    assert len(received) == on_topic == committed, "each event once: no more, no fewer"
    for session in sessions:
        assert arrivals[session] == list(range(1, heads[session] + 1)), session
    assert len(skips) >= between, "each kill between publish and delete was skipped after"
    assert all(r.events.count("producer mode") <= 1 for r in fleet.relays), "logged once"
    (mode,) = modes  # every relay in the same mode: idempotent where the broker offers it
    assert mode == {"embedded": "plain", "apache": "idempotent"}.get(kafka.kind, mode)
    print(
        f"{committed} events, {KILLS} kills ({between} between publish and delete), "
        f"{len(skips)} relays skipped rows on the topic, producer mode {mode}, "
        f"tail reads {tail_reads[len(tail_reads) // 2]:.3f}s median, {tail_reads[-1]:.3f}s max"
    )


@contextlib.contextmanager
def own_broker(kind: str, workdir: Path) -> Iterator[EmbeddedBroker | ApacheKafka]:
    """A broker of the test's own (it is stopped), of the same kind as the session's."""
    broker: EmbeddedBroker | ApacheKafka
    broker = ApacheKafka(workdir / "kafka") if kind == "apache" else EmbeddedBroker()
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


async def test_a_batch_the_broker_never_acknowledges_is_given_up_and_the_publisher_closes(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    kafka: KafkaServer,
    tmp_path: Path,
) -> None:
    # The idempotent producer (Apache Kafka) retries a batch until it is delivered, the plain
    # one (embedded broker) until it expires; the publisher gives up on it after its ack timeout
    # and abandons it on close, so closing does not wait for the broker to return.
    prefix = f"{unique_name('t')}."
    topic = EVENTS.full_name(prefix)
    with own_broker(kafka.kind, tmp_path) as broker:
        publisher = await Publisher.open(
            KafkaSettings(broker.bootstrap), topic, prefix, ack_timeout_s=1.0
        )
        sessions = await make_sessions(ledger, 2)
        await commit_round_robin(ledger, sessions, 20)
        async with PostgresOutbox(pool).shard(Shard()) as shard:
            rows = await shard.fetch(100)
        broker.stop()
        loop = asyncio.get_running_loop()
        began = loop.time()
        result = await publisher.publish(rows)
        # The ack timeout is the broker unavailable, in the one error tree (retriable).
        assert (result.acked, type(result.error)) == (0, BrokerUnavailable)
        await asyncio.wait_for(publisher.close(), 15)
        mode = "idempotent" if publisher.idempotent else "plain"
        print(f"{mode} producer gave up after {loop.time() - began:.1f}s (ack timeout 1s), closed")
