"""The relay under failure: killed mid-stream, broker down, two relays at once."""

from __future__ import annotations

import asyncio

import asyncpg
from prometheus_client import REGISTRY

from keel_stream.kafka.admin import apply_catalog
from keel_stream.kafka.broker import EmbeddedBroker
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import CommitRequest
from keel_stream.relay import RelayConfig
from keel_stream.store import PostgresLedger
from keel_stream.topics.catalog import EVENTS
from tests.support.kafka import KafkaServer, collect
from tests.support.ledger import commit_round_robin, make_sessions, outbox_empty
from tests.support.ordering import assert_each_once_in_order, has_all
from tests.support.postgres import unique_name
from tests.support.relays import RelayProcess, active_relay_pid, relay_processes, relay_task
from tests.support.wait import wait_until

FAST_RELAY = {"KEEL_RELAY_POLL_INTERVAL_S": "0.3", "KEEL_RELAY_BATCH_SIZE": "50"}


async def published(pool: asyncpg.Pool, committed: int) -> int:
    """Events committed so far that the relay has already taken out of the outbox."""
    return committed - int(await pool.fetchval("SELECT count(*) FROM outbox"))


async def test_relay_sigkilled_mid_stream_loses_nothing(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    sessions = await make_sessions(ledger, 20)
    first = RelayProcess(database_dsn, kafka.bootstrap, topic_prefix, **FAST_RELAY)
    second = RelayProcess(database_dsn, kafka.bootstrap, topic_prefix, **FAST_RELAY)
    async with relay_processes(first, second):
        await first.start()
        await first.wait_for_log("active", 30)
        writing = asyncio.create_task(commit_round_robin(ledger, sessions, 2000, writers=4))
        await wait_until(lambda: _at_least(pool, 300), 60, "the relay to publish 300 events")
        assert not writing.done(), "the kill must land while commits are still flowing"
        await first.kill()
        await second.start()
        await writing
        await second.wait_for_log("active", 30)
        await wait_until(lambda: outbox_empty(pool), 120, "the new relay to drain the outbox")
    expected = {("acme", s): 100 for s in sessions}
    received = await collect(
        kafka.bootstrap, EVENTS.full_name(topic_prefix), has_all(expected), timeout_s=120
    )
    assert_each_once_in_order(received, expected)


async def _at_least(pool: asyncpg.Pool, n: int) -> bool:
    total = await pool.fetchval("SELECT coalesce(sum(last_seq), 0) FROM sessions")
    return await published(pool, int(total)) >= n


async def test_broker_down_commits_succeed_and_drain_in_order_on_return(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str
) -> None:
    # A broker of the test's own, since it is stopped and started again (its memory goes too).
    broker = EmbeddedBroker()
    broker.start()
    prefix = f"{unique_name('t')}."
    try:
        await apply_catalog(KafkaSettings(broker.bootstrap), prefix)
        sessions = await make_sessions(ledger, 10)
        failures_before = REGISTRY.get_sample_value("keel_relay_publish_failures_total") or 0.0
        config = RelayConfig(
            database_dsn, KafkaSettings(broker.bootstrap), prefix, poll_interval_s=0.2
        )
        async with relay_task(config):
            await commit_round_robin(ledger, sessions, 10)
            await wait_until(lambda: outbox_empty(pool), 60, "the first events to publish")
            broker.stop()
            await _commit_more(ledger, sessions, 1000)
            assert await pool.fetchval("SELECT count(*) FROM outbox") >= 990

            async def relay_noticed() -> bool:
                now = REGISTRY.get_sample_value("keel_relay_publish_failures_total") or 0.0
                return now > failures_before

            await wait_until(relay_noticed, 60, "the relay to see the broker down")
            broker.start()
            await wait_until(lambda: outbox_empty(pool), 120, "the backlog to drain")
        # The memory-only broker came back empty: what arrives is exactly the 1,000.
        received = await collect(
            broker.bootstrap,
            EVENTS.full_name(prefix),
            lambda got: len({(r.event.session, r.event.seq) for r in got}) >= 1000,
            timeout_s=120,
        )
        seen = {(r.event.session, r.event.seq) for r in received}
        assert seen == {(s, seq) for s in sessions for seq in range(2, 102)}
        arrivals: dict[str, list[int]] = {}
        for r in received:
            seqs = arrivals.setdefault(r.event.session, [])
            if r.event.seq not in seqs:
                seqs.append(r.event.seq)
        assert sorted(arrivals) == sessions
        assert all(seqs == list(range(2, 102)) for seqs in arrivals.values())
    finally:
        broker.stop()


async def _commit_more(ledger: PostgresLedger, sessions: list[str], total: int) -> None:
    for i in range(total):
        submission = await ledger.commit(
            CommitRequest(
                tenant_id="acme",
                session_id=sessions[i % len(sessions)],
                kind="user.message",
                payload={"text": f"while the broker is down {i}"},
            )
        )
        assert submission.created


async def test_two_relays_one_publishes_and_the_other_takes_over(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    sessions = await make_sessions(ledger, 5)
    a = RelayProcess(database_dsn, kafka.bootstrap, topic_prefix, **FAST_RELAY)
    b = RelayProcess(database_dsn, kafka.bootstrap, topic_prefix, **FAST_RELAY)
    async with relay_processes(a, b):
        await a.start()
        await a.wait_for_log("active", 30)
        await b.start()
        await b.wait_for_log("standby", 30)
        assert await active_relay_pid(pool) == a.pid
        await commit_round_robin(ledger, sessions, 100)
        await wait_until(lambda: outbox_empty(pool), 60, "the active relay to publish")
        assert "active" not in b.events, "the standby must not publish while the active lives"

        await a.kill()
        loop = asyncio.get_running_loop()
        killed_at = loop.time()
        # The bound: the lock is freed when the dead relay's connection ends, and the standby
        # tries every poll interval (0.3 s here); allow 10 s for a loaded CI machine.
        await b.wait_for_log("active", 10)
        takeover_s = loop.time() - killed_at
        assert await active_relay_pid(pool) == b.pid
        await commit_round_robin(ledger, sessions, 100, start=100)
        await wait_until(lambda: outbox_empty(pool), 60, "the new active relay to publish")
    expected = {("acme", s): 40 for s in sessions}
    received = await collect(kafka.bootstrap, EVENTS.full_name(topic_prefix), has_all(expected))
    assert_each_once_in_order(received, expected)
    print(f"takeover after SIGKILL: {takeover_s:.2f}s")
