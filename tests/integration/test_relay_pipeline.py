"""The pipelined relay where a batch fails with later ones queued behind it, on a broker that
enforces max.message.bytes: the publisher's first failed batch ends it, so a batch of the same
partition queued behind is never sent, with the idempotent producer (whose sequence check would
refuse it too) and with the plain one (where nothing else would); and a relay with batches in
flight keeps every session's events once and in seq order around a refused event's claim check."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

import asyncpg
import pytest
from aiokafka.admin import NewTopic

from keel_stream.kafka.admin import admin_client, high_water_marks
from keel_stream.kafka.records import CLAIM_CHECK_HEADER
from keel_stream.relay import RelayConfig
from keel_stream.relay.publisher import Publisher
from keel_stream.relay.refusals import refusal
from keel_stream.store import PostgresLedger
from keel_stream.store.outbox import OutboxRow
from keel_stream.topics.catalog import EVENTS
from tests.integration.test_poison import commit
from tests.support.kafka import KafkaServer, Received, collect
from tests.support.ledger import outbox_empty
from tests.support.postgres import unique_name
from tests.support.relays import relay_task
from tests.support.wait import wait_until

BIG = 20_000
"""Bytes of text: over the topic's 4 KiB max.message.bytes."""


async def small_topic(kafka: KafkaServer) -> str:
    """A fresh prefix whose events topic takes records of at most 4 KiB."""
    if kafka.kind == "embedded":
        pytest.skip("the embedded broker does not enforce max.message.bytes")
    prefix = f"{unique_name('t')}."
    async with admin_client(kafka.settings) as admin:
        small = {**EVENTS.configs(), "max.message.bytes": "4096"}
        name = EVENTS.full_name(prefix)
        await admin.create_topics([NewTopic(name, EVENTS.partitions, 1, topic_configs=small)])
    return prefix


def row(row_id: int, seq: int, text: str) -> OutboxRow:
    return OutboxRow(row_id, "acme", "s", seq, "user.message", {"text": text}, datetime.now(UTC))


@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
async def test_a_batch_queued_behind_a_refused_one_of_its_partition_is_never_sent(
    kafka: KafkaServer, idempotent: bool
) -> None:
    prefix = await small_topic(kafka)
    topic = EVENTS.full_name(prefix)
    publisher = await Publisher.open(kafka.settings, topic, prefix, try_idempotent=idempotent)
    try:
        assert publisher.idempotent is idempotent
        first = asyncio.create_task(publisher.publish([row(1, 1, "x" * BIG)]))
        second = asyncio.create_task(publisher.publish([row(2, 2, "right behind it")]))
        refused, behind = await asyncio.wait_for(asyncio.gather(first, second), 60)
    finally:
        await asyncio.wait_for(publisher.close(), 30)
    assert (refused.acked, refusal(refused.error or Exception())) == (0, "too_large")
    assert behind.acked == 0
    assert type(behind.error) is type(refused.error), "failed with the error that ended it"
    on_topic = sum((await high_water_marks(kafka.settings, topic)).values())
    assert on_topic == 0, "s/2 never landed ahead of s/1"


def every_seq(sessions: dict[str, int]) -> Callable[[list[Received]], bool]:
    def done(received: list[Received]) -> bool:
        seen = {(r.event.session, r.event.seq) for r in received}
        return all((s, n) in seen for s, last in sessions.items() for n in range(1, last + 1))

    return done


async def test_a_relay_with_batches_in_flight_keeps_each_session_in_order_around_a_claim_check(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, kafka: KafkaServer
) -> None:
    prefix = await small_topic(kafka)
    await ledger.create_tenant("acme")
    sessions = ("a", "b", "c")
    for session in sessions:
        await ledger.create_session("acme", session)
    for n in range(1, 9):  # b/3 is too large; b/4.. are fetched into the batches behind it
        for session in sessions:
            big = session == "b" and n == 3
            await commit(ledger, session, "x" * BIG if big else f"{session} {n}")
    config = RelayConfig(
        database_dsn,
        kafka.settings,
        prefix,
        batch_size=2,
        batches_in_flight=3,
        poll_interval_s=0.2,
    )
    async with relay_task(config):
        await wait_until(lambda: outbox_empty(pool), 60, "the relay to publish everything")
    received = await collect(
        kafka.bootstrap, EVENTS.full_name(prefix), every_seq(dict.fromkeys(sessions, 8))
    )
    arrivals = {s: [r.event.seq for r in received if r.event.session == s] for s in sessions}
    assert arrivals == {s: list(range(1, 9)) for s in sessions}, "each seq once, in order"
    stand_ins = [r for r in received if CLAIM_CHECK_HEADER in r.headers]
    assert [(r.event.session, r.event.seq) for r in stand_ins] == [("b", 3)]
