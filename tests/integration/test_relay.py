"""The outbox relay: every committed event reaches keel.events.v1, in order per session."""

from __future__ import annotations

import asyncpg
from prometheus_client import REGISTRY

from keel_stream.relay import RelayConfig
from keel_stream.store import PostgresLedger
from keel_stream.topics.catalog import EVENTS
from tests.support.kafka import KafkaServer, collect
from tests.support.ledger import commit_round_robin, make_sessions, outbox_empty
from tests.support.ordering import assert_each_once_in_order, has_all
from tests.support.relays import relay_task
from tests.support.wait import wait_until


def metric(name: str) -> float:
    return REGISTRY.get_sample_value(name) or 0.0


async def test_5000_events_over_50_sessions_reach_the_topic_in_order(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    sessions = await make_sessions(ledger, 50)
    published_before = metric("keel_relay_published_events_total")
    config = RelayConfig(database_dsn, kafka.settings, topic_prefix, poll_interval_s=0.5)
    async with relay_task(config):
        await commit_round_robin(ledger, sessions, 5000)
        await wait_until(lambda: outbox_empty(pool), 120, "the outbox to drain")
    expected = {("acme", s): 100 for s in sessions}
    received = await collect(
        kafka.bootstrap, EVENTS.full_name(topic_prefix), has_all(expected), timeout_s=120
    )
    assert_each_once_in_order(received, expected)
    assert metric("keel_relay_published_events_total") - published_before >= 5000
    sample = received[0]
    assert sample.key == f"{sample.event.tenant}/{sample.event.session}".encode()
    assert sample.headers == {
        "tenant": b"acme",
        "session": sample.event.session.encode(),
        "seq": str(sample.event.seq).encode(),
        "kind": b"user.message",
    }
    partitions_per_session = {(r.event.session, r.partition) for r in received}
    assert len(partitions_per_session) == 50, "each session's events live in one partition"


async def test_commits_wait_in_the_outbox_while_no_relay_runs(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    sessions = await make_sessions(ledger, 3)
    await commit_round_robin(ledger, sessions, 30)
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 30
    config = RelayConfig(database_dsn, kafka.settings, topic_prefix, batch_size=7)
    async with relay_task(config):
        await wait_until(lambda: outbox_empty(pool), 60, "the backlog to drain")
    expected = {("acme", s): 10 for s in sessions}
    received = await collect(kafka.bootstrap, EVENTS.full_name(topic_prefix), has_all(expected))
    assert_each_once_in_order(received, expected)
