"""Topic catalog on a real broker: apply, drift, describe, and the CLI around them."""

from __future__ import annotations

import os
import subprocess
import sys

import asyncpg
from aiokafka.admin import NewTopic

from keel_stream.kafka.admin import admin_client, apply_catalog, describe_topics
from keel_stream.relay import RelayConfig
from keel_stream.store import PostgresLedger
from keel_stream.topics.catalog import CATALOG, EVENTS
from tests.support.kafka import KafkaServer, collect
from tests.support.ledger import commit_round_robin, make_sessions, outbox_empty
from tests.support.ordering import has_all
from tests.support.postgres import unique_name
from tests.support.relays import relay_task
from tests.support.wait import wait_until


async def test_apply_creates_missing_topics_once(kafka: KafkaServer) -> None:
    prefix = f"{unique_name('t')}."
    first = await apply_catalog(kafka.settings, prefix)
    assert sorted(first.created) == sorted(s.full_name(prefix) for s in CATALOG)
    second = await apply_catalog(kafka.settings, prefix)
    assert second.created == []
    assert sorted(second.existing) == sorted(first.created)
    assert second.clean, second.drift


async def test_apply_reports_partition_drift(kafka: KafkaServer) -> None:
    prefix = f"{unique_name('t')}."
    async with admin_client(kafka.settings) as admin:
        await admin.create_topics([NewTopic(EVENTS.full_name(prefix), 2, 1)])
    report = await apply_catalog(kafka.settings, prefix)
    assert EVENTS.full_name(prefix) not in report.created
    assert any("2 partitions, catalog says 6" in line for line in report.drift)


async def test_describe_shows_high_water_and_group_lag(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    sessions = await make_sessions(ledger, 4)
    async with relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix)):
        await commit_round_robin(ledger, sessions, 120)
        await wait_until(lambda: outbox_empty(pool), 60, "the outbox to drain")
    states = await describe_topics(kafka.settings, topic_prefix, groups=["nobody"])
    events = [s for s in states if s.topic == EVENTS.full_name(topic_prefix)]
    assert len(events) == EVENTS.partitions
    # The relay may have sent a few records twice; never fewer than were committed.
    assert sum(s.high_water for s in events) >= 120
    assert sum(s.lag("nobody") for s in events) == sum(s.high_water for s in events)
    await collect(
        kafka.bootstrap,
        EVENTS.full_name(topic_prefix),
        has_all({("acme", s): 30 for s in sessions}),
    )


def keel(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "keel_stream", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
        check=False,
    )


def test_topics_cli_apply_and_describe(kafka: KafkaServer) -> None:
    env = {"KEEL_KAFKA_BOOTSTRAP": kafka.bootstrap, "KEEL_TOPIC_PREFIX": f"{unique_name('t')}."}
    first = keel("topics", "apply", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.count("created") == len(CATALOG)
    again = keel("topics", "apply", env=env)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("exists") == len(CATALOG)
    described = keel("topics", "describe", "--group", "g1", env=env)
    assert described.returncode == 0, described.stderr
    assert "keel.events.v1" in described.stdout
    assert "lag:g1" in described.stdout
