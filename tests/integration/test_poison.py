"""No poison pill between the ledger and the topic: an event over the kernel's limit never enters
the log (413 at the API); one the broker refuses goes out as a claim check in its place and the
relay goes on with everyone else; the backlog gauge tells the truth while the broker is away."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg
import pytest
from aiokafka.admin import NewTopic
from aiokafka.errors import MessageSizeTooLargeError
from prometheus_client import REGISTRY

from keel_stream.kafka.admin import admin_client, apply_catalog
from keel_stream.kafka.broker import free_port
from keel_stream.kafka.records import CLAIM_CHECK_FIELD, CLAIM_CHECK_HEADER
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import CommitRequest
from keel_stream.kernel.limits import MAX_EVENT_BYTES
from keel_stream.relay import Relay, RelayConfig
from keel_stream.store import PostgresLedger
from keel_stream.topics.catalog import EVENTS
from tests.support.api import serve_api
from tests.support.kafka import KafkaServer, Received, collect
from tests.support.ledger import outbox_empty
from tests.support.postgres import unique_name
from tests.support.projector import models_equal_ledger_fold, projector
from tests.support.relays import relay_task
from tests.support.wait import wait_until

BIG = 20_000
"""Bytes of text: far under the kernel's limit, over the small record limits used here."""


def claim_checked() -> float:
    return REGISTRY.get_sample_value("keel_relay_claim_checked_events_total") or 0.0


async def commit(ledger: PostgresLedger, session: str, text: str) -> int:
    request = CommitRequest(
        tenant_id="acme", session_id=session, kind="user.message", payload={"text": text}
    )
    return (await ledger.commit(request)).seq


async def commit_with_a_big_one(ledger: PostgresLedger) -> None:
    """a/1, b/1 (big), b/2, c/1, a/2: the big event between others, of its own session and not."""
    await ledger.create_tenant("acme")
    for session in ("a", "b", "c"):
        await ledger.create_session("acme", session)
    await commit(ledger, "a", "a one")
    await commit(ledger, "b", "x" * BIG)
    await commit(ledger, "b", "b two")
    await commit(ledger, "c", "c one")
    await commit(ledger, "a", "a two")


def every_seq(received: list[Received]) -> bool:
    return {(r.event.session, r.event.seq) for r in received} >= {
        ("a", 1),
        ("a", 2),
        ("b", 1),
        ("b", 2),
        ("c", 1),
    }


def assert_claim_checked_in_place(received: list[Received]) -> None:
    by_session: dict[str, list[Received]] = {}
    for r in received:
        by_session.setdefault(r.event.session, []).append(r)
    assert {s: [r.event.seq for r in rs] for s, rs in by_session.items()} == {
        "a": [1, 2],
        "b": [1, 2],
        "c": [1],
    }, "every seq once, in order: the claim check keeps the refused event's place"
    stand_in, after = by_session["b"]
    assert stand_in.headers[CLAIM_CHECK_HEADER] == b"too_large"
    assert stand_in.event.kind == "user.message"
    details = stand_in.event.payload[CLAIM_CHECK_FIELD]
    assert details["reason"] == "too_large"
    assert details["payloadBytes"] > BIG
    assert after.event.payload == {"text": "b two"}
    assert CLAIM_CHECK_HEADER not in after.headers
    assert all(CLAIM_CHECK_HEADER not in r.headers for r in by_session["a"] + by_session["c"])


async def publish_all(
    pool: asyncpg.Pool,
    config: RelayConfig,
    bootstrap: str,
    done: Callable[[list[Received]], bool],
) -> list[Received]:
    async with relay_task(config):
        await wait_until(lambda: outbox_empty(pool), 60, "the relay to publish everything")
    return await collect(bootstrap, EVENTS.full_name(config.topic_prefix), done)


async def test_an_event_over_the_kernel_limit_is_413_at_the_api_and_never_committed(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    async with serve_api(database_dsn) as api, api.client() as client:
        created = await client.post("/v1/sessions", json={"id": "s1"})
        assert created.status_code == 201, created.text
        text = "x" * (MAX_EVENT_BYTES + 1)
        refused = await client.post("/v1/sessions/s1/input", json={"text": text})
        assert refused.status_code == 413, refused.text
        assert refused.json()["error"]["code"] == "payload_too_large"
        accepted = await client.post("/v1/sessions/s1/input", json={"text": "fits"})
        assert accepted.status_code == 201, accepted.text
        assert accepted.json()["seq"] == 1
    assert await pool.fetchval("SELECT count(*) FROM events") == 1


async def test_a_record_over_the_topics_limit_goes_out_as_a_claim_check_and_the_rest_follows(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, kafka: KafkaServer
) -> None:
    # The topic was created (by an older catalog, or by hand) with a small max.message.bytes:
    # the producer lets the record through, the broker refuses it.
    if kafka.kind == "embedded":
        pytest.skip("the embedded broker does not enforce max.message.bytes")
    prefix = f"{unique_name('t')}."
    events = EVENTS.full_name(prefix)
    async with admin_client(kafka.settings) as admin:
        small = {**EVENTS.configs(), "max.message.bytes": "4096"}
        await admin.create_topics([NewTopic(events, EVENTS.partitions, 1, topic_configs=small)])
    report = await apply_catalog(kafka.settings, prefix)
    assert f"{events}: max.message.bytes=4096, catalog says 1048588" in report.drift
    await commit_with_a_big_one(ledger)
    before = claim_checked()
    config = RelayConfig(database_dsn, kafka.settings, prefix, poll_interval_s=0.2)
    received = await publish_all(pool, config, kafka.bootstrap, every_seq)
    assert_claim_checked_in_place(received)
    assert claim_checked() == before + 1


async def test_a_record_over_the_producers_limit_goes_out_as_a_claim_check_and_the_rest_follows(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    await commit_with_a_big_one(ledger)
    before = claim_checked()
    config = RelayConfig(
        database_dsn, kafka.settings, topic_prefix, poll_interval_s=0.2, max_record_bytes=4096
    )
    received = await publish_all(pool, config, kafka.bootstrap, every_seq)
    assert_claim_checked_in_place(received)
    assert claim_checked() == before + 1


async def test_a_claim_check_the_topic_cannot_take_either_stops_the_relay_loudly(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    # Not even a claim check (at most about a KiB) fits: no retry could ever send it. The relay
    # stops with the error instead of looping on it, and the event stays in the outbox.
    await ledger.create_tenant("acme")
    await ledger.create_session("acme", "s1")
    await commit(ledger, "s1", "hi")
    config = RelayConfig(database_dsn, kafka.settings, topic_prefix, max_record_bytes=200)
    with pytest.raises(MessageSizeTooLargeError):
        await asyncio.wait_for(Relay.from_config(config).run(asyncio.Event()), 60)
    assert await pool.fetchval("SELECT count(*) FROM outbox") == 1


async def test_the_backlog_gauge_counts_the_outbox_while_the_broker_is_away(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str
) -> None:
    await ledger.create_tenant("acme")
    await ledger.create_session("acme", "s1")
    for i in range(909):
        await commit(ledger, "s1", f"event {i}")
    nowhere = f"127.0.0.1:{free_port()}"  # no broker ever answers here
    config = RelayConfig(
        database_dsn, KafkaSettings(nowhere), f"{unique_name('t')}.", poll_interval_s=0.2
    )

    def gauge(name: str) -> float:
        return REGISTRY.get_sample_value(name) or 0.0

    def backlog_is(events: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            return gauge("keel_relay_backlog_events") == events

        return check

    async with relay_task(config):
        await wait_until(backlog_is(909), 30, "the gauge to count the outbox")
        await commit(ledger, "s1", "one more")
        await wait_until(backlog_is(910), 30, "the gauge to follow the outbox")
        assert gauge("keel_relay_oldest_unpublished_seconds") > 0
        assert await pool.fetchval("SELECT count(*) FROM outbox") == 910


async def test_the_projector_folds_a_claim_check_as_the_event_from_the_ledger(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    await commit_with_a_big_one(ledger)
    config = RelayConfig(
        database_dsn, kafka.settings, topic_prefix, poll_interval_s=0.2, max_record_bytes=4096
    )
    async with (
        relay_task(config),
        projector(database_dsn, kafka.bootstrap, topic_prefix, tmp_path),
    ):
        await wait_until(lambda: outbox_empty(pool), 60, "the relay to publish everything")
        # Folded from the claim check alone, b's transcript would hold its stand-in payload.
        await wait_until(
            lambda: models_equal_ledger_fold(pool), 120, "the read models to equal the ledger"
        )
