"""A three-broker Apache Kafka cluster with SASL/SCRAM, topics replicated three times with two in
sync: one broker SIGKILLed under steady commits, the relay and an analytics consumer carry on,
and every ledger event is on the topic exactly once, in order per session."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import replace

import asyncpg
import orjson
import pytest

from keel_stream.analytics.tail import TailOptions, tail
from keel_stream.errors import BrokerAccessDenied
from keel_stream.kafka.admin import admin_client, apply_catalog
from keel_stream.kafka.apache_cluster import ApacheKafkaCluster
from keel_stream.kafka.read_all import RawRecord, read_to_end
from keel_stream.kafka.records import EventRecordCodec
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import CommitRequest
from keel_stream.relay import RelayConfig
from keel_stream.store import PostgresLedger
from keel_stream.topics.catalog import EVENTS
from tests.support.kafka_cluster import kafka_cluster
from tests.support.ledger import make_sessions, outbox_empty
from tests.support.postgres import unique_name
from tests.support.relays import relay_task
from tests.support.wait import wait_until

SESSIONS = 8


@pytest.fixture(scope="module")
def cluster() -> Iterator[ApacheKafkaCluster]:
    with kafka_cluster() as started:
        yield started


def replicated(cluster: ApacheKafkaCluster) -> KafkaSettings:
    """The cluster's client settings as a production deployment sets them (KEEL_KAFKA_*)."""
    return replace(cluster.settings, replication_factor=3, min_insync_replicas=2)


async def published(pool: asyncpg.Pool) -> int:
    """Events committed and taken out of the outbox (the broker acknowledged them)."""
    return int(
        await pool.fetchval("SELECT (SELECT count(*) FROM events) - (SELECT count(*) FROM outbox)")
    )


async def commit_until(ledger: PostgresLedger, sessions: list[str], stop: asyncio.Event) -> int:
    """Two writers committing user messages round-robin, paced, until stop; how many."""
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
            await asyncio.sleep(0.01)  # a steady stream, not a burst
        return done

    return sum(await asyncio.gather(writer(), writer()))


async def events_leader(kafka: KafkaSettings, topic: str) -> tuple[int, list[int]]:
    """The broker leading the events topic's partition 0, and that partition's replicas, once
    every broker asked knows the new topic (the controller propagates it asynchronously)."""
    found: list[tuple[int, list[int]]] = []

    async def described() -> bool:
        async with admin_client(kafka, "test") as admin:
            (topic_meta,) = await admin.describe_topics([topic])
        found[:] = [
            (int(p["leader"]), [int(r) for r in p["replicas"]])
            for p in topic_meta["partitions"]
            if p["partition"] == 0 and p["leader"] >= 0
        ]
        return bool(found)

    await wait_until(described, 10, f"{topic}-0 to have a leader")
    return found[0]


def arrivals_of(records: Sequence[RawRecord], into: dict[str, list[int]]) -> None:
    for record in records:
        assert record.value is not None
        event = EventRecordCodec.decode(record.value)
        into[event.session].append(event.seq)


async def test_a_broker_killed_under_commits_loses_and_duplicates_no_event_on_the_topic(
    cluster: ApacheKafkaCluster, ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str
) -> None:
    kafka, prefix = replicated(cluster), f"{unique_name('c')}."
    applied = await apply_catalog(kafka, prefix)
    assert applied.clean, applied.drift  # min.insync.replicas=2 as the settings say
    topic = EVENTS.full_name(prefix)
    victim, replicas = await events_leader(kafka, topic)
    assert sorted(replicas) == [1, 2, 3]
    sessions = await make_sessions(ledger, SESSIONS)
    config = RelayConfig(database_dsn, kafka, prefix, batch_size=50, poll_interval_s=0.05)
    seen: list[bytes] = []
    stop_tail, stop_writing = asyncio.Event(), asyncio.Event()
    options = TailOptions(kafka, topic, dedupe=False)
    tailing = asyncio.create_task(tail(options, seen.append, stop_tail))
    async with relay_task(config):
        writing = asyncio.create_task(commit_until(ledger, sessions, stop_writing))
        try:
            await wait_until(lambda: _at_least(pool, 100), 30, "100 events published")
            at_kill, killed_at = (
                await pool.fetchval("SELECT count(*) FROM events"),
                time.monotonic(),
            )
            cluster.kill(victim)
            await wait_until(lambda: _at_least(pool, at_kill + 1), 60, "a commit after the kill")
            recovered_s = time.monotonic() - killed_at
            after = await published(pool)
            await wait_until(lambda: _at_least(pool, after + 100), 30, "100 more published")
            assert not writing.done(), "commits keep arriving while a broker is down"
        finally:
            stop_writing.set()
            committed = await writing
        await wait_until(lambda: outbox_empty(pool), 60, "the relay to drain the outbox")
    await wait_until(_reads_all(seen, committed), 60, "the analytics tail to read every event")
    stop_tail.set()
    await tailing
    arrivals: dict[str, list[int]] = defaultdict(list)
    read = await read_to_end(kafka, topic, lambda batch: arrivals_of(batch, arrivals))
    heads = dict(await pool.fetch("SELECT session_id, last_seq FROM sessions"))
    assert sum(heads.values()) == committed
    assert sum(read.ends.values()) - sum(read.starts.values()) == committed, "each event once"
    for session in sessions:
        assert arrivals[session] == list(range(1, heads[session] + 1)), session
    restarted_at = time.monotonic()
    await asyncio.to_thread(cluster.restart, victim)
    print(
        f"apache-kafka {cluster.version}, 3 brokers, RF 3, min.insync.replicas 2, "
        f"SASL {cluster.mechanism}: {committed} commits, broker {victim} (leader of "
        f"{topic}-0) SIGKILLed after {at_kill}; relay published again {recovered_s:.2f} s after "
        f"the kill; tail read {len(seen)} records; broker back in "
        f"{time.monotonic() - restarted_at:.1f} s"
    )


async def _at_least(pool: asyncpg.Pool, count: int) -> bool:
    return await published(pool) >= count


def _reads_all(seen: list[bytes], count: int) -> Callable[[], Awaitable[bool]]:
    """Whether the tail has emitted `count` distinct events (it may re-read some after its
    group's coordinator moved: at least once)."""

    async def done() -> bool:
        distinct = {(e["session"], e["seq"]) for e in map(orjson.loads, seen)}
        return len(distinct) >= count

    return done


async def test_wrong_sasl_credentials_are_refused_as_broker_access_denied(
    cluster: ApacheKafkaCluster,
) -> None:
    wrong = cluster.settings_as(cluster.username, "not-the-password")
    with pytest.raises(BrokerAccessDenied) as refused:
        await read_to_end(wrong, EVENTS.full_name("any."), lambda batch: None)
    assert refused.value.code == "broker_access_denied"
