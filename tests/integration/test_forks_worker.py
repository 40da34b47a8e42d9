"""A fork is for continuing: workers answer on forks (of sessions with many runs, of forks, and
through a SIGKILL), and the fork's answers never collide with the answers it copied."""

from __future__ import annotations

import signal
from pathlib import Path

import asyncpg
import orjson
from aiokafka import AIOKafkaConsumer

from keel_stream.kafka.partitions import topic_partitions
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import CommitRequest, Event, account_inputs
from keel_stream.store import PostgresLedger
from keel_stream.topics.catalog import PARTIALS
from tests.support.kafka import KafkaServer
from tests.support.wait import wait_until
from tests.support.workers import (
    WorkerProcess,
    log_of,
    run_status,
    settled,
    worker_task,
)

SOURCE_INPUTS = ('[[tool:echo {"n": 1}]] look it up', "two", "three", "four", "five")


async def say(ledger: PostgresLedger, session: str, text: str, key: str) -> int:
    request = CommitRequest(
        tenant_id="acme", session_id=session, kind="user.message", payload={"text": text}, key=key
    )
    return (await ledger.commit(request)).seq


async def converse(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: str, texts: tuple[str, ...]
) -> None:
    """One input at a time, each answered by its own run before the next is sent."""
    for index, text in enumerate(texts):
        await say(ledger, session, text, f"{session}-r{index}")
        await settled(pool, session, "done", "failed")
        assert await run_status(pool, session) == "done", f"{session}: {text!r} not answered"


def keys_of(events: list[Event]) -> list[str]:
    """The answers' generationIds and the results' toolCallIds, in log order."""
    keyed = {"assistant.message": "generationId", "tool.result": "toolCallId"}
    return [str(e.payload[keyed[e.kind]]) for e in events if e.kind in keyed]


def assert_answered_by_its_own_answers(events: list[Event], copied: int) -> None:
    """Every input is answered, the fork's own answers are new (none failed) and every key of
    the whole log, copied prefix included, is unique."""
    assert account_inputs(events).unanswered == ()
    own = [e for e in events if e.seq > copied]
    assert {e.payload["status"] for e in own if e.kind == "run.finished"} == {"done"}
    assert all(e.payload["stopReason"] != "error" for e in own if e.kind == "assistant.message")
    keys = keys_of(events)
    assert len(keys) == len(set(keys)), keys


async def test_a_worker_answers_on_a_fork_of_a_five_run_session(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn):
        await converse(ledger, pool, "s1", SOURCE_INPUTS)
        fork = await ledger.fork("acme", "s1", session_id="f1")
        asked = await say(ledger, "f1", '[[tool:echo {"n": 6}]] and now?', "f1-r0")
        await settled(pool, "f1", "done", "failed")
    events = await log_of(ledger, "f1")
    assert_answered_by_its_own_answers(events, fork.at_seq)
    first, final = [e for e in events if e.seq > fork.at_seq and e.kind == "assistant.message"]
    assert (first.payload["inputSeqs"], first.payload["stopReason"]) == ([asked], "tool_use")
    assert final.payload["stopReason"] == "end_turn"


async def test_a_worker_answers_on_a_fork_of_a_fork(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn):
        await converse(ledger, pool, "s1", SOURCE_INPUTS[:3])
        await ledger.fork("acme", "s1", session_id="f1")
        await converse(ledger, pool, "f1", SOURCE_INPUTS[:3])
        fork = await ledger.fork("acme", "f1", session_id="f2")
        await converse(ledger, pool, "f2", SOURCE_INPUTS[:2])
    events = await log_of(ledger, "f2")
    assert_answered_by_its_own_answers(events, fork.at_seq)
    assert len([e for e in events if e.kind == "run.finished"]) == 3 + 3 + 2


async def first_partial_of(bootstrap: str, topic: str, session: str) -> str:
    """Wait for the first partial frame a worker streams for `session`: its generationId."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, fetch_max_wait_ms=50, auto_offset_reset="earliest"
    )
    await consumer.start()
    found: list[str] = []
    try:
        partitions = await topic_partitions(KafkaSettings(bootstrap), [topic])
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)

        async def streaming() -> bool:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                frames = [orjson.loads(r.value) for r in records]
                found.extend(f["generationId"] for f in frames if f["session"] == session)
            return bool(found)

        await wait_until(streaming, 60, f"a partial of {session}")
    finally:
        await consumer.stop()
    return found[0]


async def test_a_fork_is_answered_after_its_worker_is_sigkilled_mid_answer(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    async with worker_task(database_dsn):
        await converse(ledger, pool, "s1", SOURCE_INPUTS)
    fork = await ledger.fork("acme", "s1", session_id="f1")
    copied = keys_of(await log_of(ledger, "f1"))
    env = {"KEEL_KAFKA_BOOTSTRAP": kafka.bootstrap, "KEEL_TOPIC_PREFIX": topic_prefix}
    first = await WorkerProcess(database_dsn, tmp_path, **env).start()
    try:
        words = " ".join(f"w{i}" for i in range(20))
        await say(ledger, "f1", f"[[slow:300]] {words}", "f1-r0")
        topic = PARTIALS.full_name(topic_prefix)
        streamed = await first_partial_of(kafka.bootstrap, topic, "f1")
    finally:
        await first.signal(signal.SIGKILL)  # the fork's first answer is still streaming
    assert streamed not in copied, "the fork's generation is its own"
    async with worker_task(database_dsn):
        await settled(pool, "f1", "done", "failed")
    events = await log_of(ledger, "f1")
    assert account_inputs(events).unanswered == ()
    summaries = [e.payload for e in events if e.seq > fork.at_seq and e.kind == "run.finished"]
    assert [(s["status"], s.get("abandonedEpoch")) for s in summaries] == [
        ("failed", 1),
        ("done", None),
    ]
    keys = keys_of(events)
    assert len(keys) == len(set(keys)), keys
