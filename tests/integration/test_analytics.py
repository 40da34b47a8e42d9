"""The analytics side: `keel-stream tail`, republish, and the consumer example in docs/topics.md."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import asyncpg
import orjson

from keel_stream.kernel import CommitRequest, LeaseToken
from keel_stream.relay import RelayConfig
from keel_stream.store.outbox import PostgresOutbox
from keel_stream.store.postgres import PostgresLedger
from keel_stream.topics.catalog import EVENTS
from tests.support.cli import run_keel
from tests.support.kafka import KafkaServer, collect
from tests.support.ledger import commit_round_robin, grant_lease, make_sessions, outbox_empty
from tests.support.ordering import assert_each_once_in_order, has_all
from tests.support.relays import relay_task
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]


async def publish_sample(
    ledger: PostgresLedger, pool: asyncpg.Pool, dsn: str, kafka: KafkaServer, prefix: str
) -> list[str]:
    """Three sessions of user messages plus one run.finished, all published."""
    sessions = await make_sessions(ledger, 3)
    await commit_round_robin(ledger, sessions, 9)
    lease = LeaseToken(owner="w1", epoch=1)
    await grant_lease(pool, "acme", sessions[0], lease)
    await ledger.commit(
        CommitRequest(
            tenant_id="acme",
            session_id=sessions[0],
            kind="run.finished",
            payload={"status": "done", "turns": 1},
            lease=lease,
        )
    )
    await ledger.create_tenant("globex")
    await ledger.create_session("globex", "g1")
    await ledger.commit(
        CommitRequest(tenant_id="globex", session_id="g1", kind="user.message", payload={})
    )
    async with relay_task(RelayConfig(dsn, kafka.settings, prefix)):
        await wait_until(lambda: outbox_empty(pool), 60, "the outbox to drain")
    return sessions


async def test_tail_prints_filtered_json_lines(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    await publish_sample(ledger, pool, database_dsn, kafka, topic_prefix)
    env = {"KEEL_KAFKA_BOOTSTRAP": kafka.bootstrap, "KEEL_TOPIC_PREFIX": topic_prefix}
    args = ["tail", "--tenant", "acme", "--kind", "user.message", "--limit", "9"]
    result = await run_keel(*args, env=env)
    assert result.returncode == 0, result.stderr
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 9
    assert {(e["tenant"], e["kind"]) for e in lines} == {("acme", "user.message")}
    assert {"tenant", "session", "seq", "kind", "payload", "committedAt"} <= set(lines[0])


async def test_tail_refuses_a_missing_topic(kafka: KafkaServer) -> None:
    env = {"KEEL_KAFKA_BOOTSTRAP": kafka.bootstrap, "KEEL_TOPIC_PREFIX": "nope."}
    result = await run_keel("tail", "--limit", "1", env=env)
    assert result.returncode == 1
    assert "topic_missing" in result.stderr


async def test_republish_reseeds_a_topic_that_lost_its_data(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    sessions = await make_sessions(ledger, 4)
    await commit_round_robin(ledger, sessions, 40)
    # The broker "lost" everything: nothing was ever published and the outbox is gone too.
    await pool.execute("DELETE FROM outbox")
    report = await PostgresOutbox(pool).republish(tenant="acme")
    assert (report.sessions, report.events) == (4, 40)
    again = await PostgresOutbox(pool).republish(session=sessions[0])
    assert again.events == 0, "events still waiting in the outbox are not enqueued twice"
    async with relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix)):
        await wait_until(lambda: outbox_empty(pool), 60, "the republished events to publish")
    expected = {("acme", s): 10 for s in sessions}
    received = await collect(kafka.bootstrap, EVENTS.full_name(topic_prefix), has_all(expected))
    assert_each_once_in_order(received, expected)


async def test_republish_after_seq(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    for i in range(5):
        await ledger.commit(
            CommitRequest(tenant_id="acme", session_id="s1", kind="user.message", payload={"n": i})
        )
    await pool.execute("DELETE FROM outbox")
    report = await PostgresOutbox(pool).republish(tenant="acme", session="s1", after_seq=3)
    assert report.events == 2
    assert [r["seq"] for r in await pool.fetch("SELECT seq FROM outbox ORDER BY id")] == [4, 5]


async def test_docs_consumer_example_runs(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    await publish_sample(ledger, pool, database_dsn, kafka, topic_prefix)
    text = (ROOT / "docs" / "topics.md").read_text()
    blocks = re.findall(r"```python[^\n]*\n(.*?)```", text, re.DOTALL)
    (code,) = [block for block in blocks if "AIOKafkaConsumer" in block]
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/topics.md", "exec"), namespace)
    count_kinds = cast(Callable[..., Awaitable[dict[str, int]]], namespace["count_kinds"])
    counts = await count_kinds(kafka.bootstrap, EVENTS.full_name(topic_prefix), expected=11)
    assert counts == {"user.message": 10, "run.finished": 1}
