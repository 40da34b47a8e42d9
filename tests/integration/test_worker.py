"""The agent runtime: runs, leases, the loop, providers, cancel, drain and takeover."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from keel_stream.errors import LeaseFenced
from keel_stream.kafka.partitions import topic_partitions
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import CommitRequest, Event, LeaseToken, account_inputs
from keel_stream.store import ExternalMarkers, PostgresLedger
from keel_stream.store.runs import PostgresRuns as RunStore
from keel_stream.topics.catalog import PARTIALS
from keel_stream.worker.tools import BuiltinContext
from tests.support.kafka import KafkaServer
from tests.support.wait import wait_until
from tests.support.workers import (
    RecordingProvider,
    WorkerProcess,
    log_of,
    run_status,
    settled,
    tool_call_committed,
    worker_task,
)

pytestmark = pytest.mark.usefixtures("one_summary_per_attempt")


async def say(
    ledger: PostgresLedger, text: str, key: str, delivery: str | None = None, session: str = "s1"
) -> int:
    payload: dict[str, Any] = {"text": text}
    if delivery:
        payload["delivery"] = delivery
    submission = await ledger.commit(
        CommitRequest(
            tenant_id="acme", session_id=session, kind="user.message", payload=payload, key=key
        )
    )
    return submission.seq


def answers(events: list[Event]) -> list[Event]:
    return [e for e in events if e.kind == "assistant.message"]


def assert_each_input_answered_once(events: list[Event]) -> None:
    inputs = [e.seq for e in events if e.kind == "user.message"]
    answered = [
        s
        for e in answers(events)
        if e.payload["stopReason"] not in ("error", "aborted")
        for s in e.payload["inputSeqs"]
    ]
    assert sorted(answered) == inputs, (answered, inputs)


async def test_the_seed_verified_stream(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn):
        await say(ledger, "hello keel", "9e5088a0")
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    assert [(e.seq, e.kind) for e in events] == [
        (1, "user.message"),
        (2, "assistant.message"),
        (3, "run.finished"),
    ]
    assert events[0].payload == {"text": "hello keel", "requestId": "9e5088a0"}
    answer = events[1].payload
    assert answer["role"] == "assistant"
    assert answer["content"] == [{"type": "text", "text": "echo: hello keel"}]
    assert (answer["inputSeqs"], answer["stopReason"]) == ([1], "end_turn")
    summary = events[2].payload
    assert (summary["status"], summary["turns"], summary["stopReason"]) == ("done", 1, "end_turn")
    assert (summary["provider"], summary["model"]) == ("fake", "fake")
    assert summary["toolTimings"] == []


async def test_guide_during_a_tool_turn_goes_to_the_next_request(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn):
        await say(ledger, '[[tool:sleep {"seconds": 1.5}]] look it up', "r1")
        await tool_call_committed(ledger, "s1", timeout_s=30)
        guide_seq = await say(ledger, "also check the weather", "r2", delivery="guide")
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    guide = next(e for e in events if e.seq == guide_seq)
    assert guide.payload["delivery"] == "guide", "an active attempt keeps guide"
    first, second = answers(events)
    assert first.payload["inputSeqs"] == [1]
    assert first.seq < guide_seq < second.seq
    assert second.payload["inputSeqs"] == [guide_seq]
    result = next(e for e in events if e.kind == "tool.result")
    assert first.seq < result.seq < second.seq, "the result comes before the next request"
    assert_each_input_answered_once(events)


async def test_provider_error_is_retried(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn):
        await say(ledger, "[[fail:1]] flaky", "r1")
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    outcome = [
        (e.kind, e.payload["status"] if e.kind == "run.finished" else e.payload.get("stopReason"))
        for e in events
    ]
    assert outcome == [
        ("user.message", None),
        ("assistant.message", "error"),
        ("run.finished", "failed"),
        ("assistant.message", "end_turn"),
        ("run.finished", "done"),
    ]
    assert answers(events)[1].payload["inputSeqs"] == [1], "the retry answers the input"


async def test_provider_errors_fail_the_run_when_the_budget_is_spent(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn):
        await say(ledger, "[[fail:9]] broken", "r1")
        await settled(pool, "s1", "failed")
    events = await log_of(ledger, "s1")
    summaries = [e.payload["status"] for e in events if e.kind == "run.finished"]
    assert summaries == ["failed", "failed", "failed"]  # max_attempts = 3
    assert account_inputs(events).unanswered == (1,)


async def test_tool_turn_then_failed_call_owes_a_turn_and_is_not_done(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn):
        await say(ledger, '[[tool:echo {"x": 1}]] [[fail-after-tool]] go', "r1")
        await settled(pool, "s1", "failed")
    events = await log_of(ledger, "s1")
    account = account_inputs(events)
    assert account.owed_turn
    assert account.unanswered == ()
    assert "done" not in [e.payload["status"] for e in events if e.kind == "run.finished"]
    assert [e.kind for e in events[:4]] == [
        "user.message", "assistant.message", "tool.result", "assistant.message",
    ]  # fmt: skip
    assert events[3].payload["stopReason"] == "error"


async def test_cancel_keeps_the_streamed_text_and_the_next_run_answers_both(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    runs = RunStore(pool, "test", 10)
    provider = RecordingProvider()

    async def streaming() -> bool:
        return provider.deltas >= 2

    async with worker_task(database_dsn, provider=provider):
        await say(ledger, "[[slow:300]] one two three four five six seven eight", "r1")
        await wait_until(streaming, 30, "two deltas streamed")
        assert await runs.request_cancel("acme", "s1")
        await settled(pool, "s1", "failed")
        events = await log_of(ledger, "s1")
        aborted = answers(events)[0]
        assert aborted.payload["stopReason"] == "aborted"
        assert aborted.payload["content"][0]["text"].startswith("echo:")
        summary = [e for e in events if e.kind == "run.finished"][-1]
        assert summary.payload["status"] == "cancelled"
        assert account_inputs(events).unanswered == (1,)
        new_input = await say(ledger, "are you there", "r2")
        await settled(pool, "s1", "done")
    final = answers(await log_of(ledger, "s1"))[-1]
    assert final.payload["inputSeqs"] == [1, new_input]


async def _running(pool: asyncpg.Pool) -> bool:
    return await run_status(pool, "s1") == "running"


async def test_external_sessions_are_never_claimed(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    await ledger.create_session("acme", "ext", external=ExternalMarkers(backend="dsh", ref="r"))
    await pool.execute(
        "INSERT INTO runs (tenant_id, session_id, status) VALUES ('acme', 'ext', 'pending')"
    )
    assert await RunStore(pool, "w", 10).claim() is None
    await say(ledger, "hi", "r1")
    claim = await RunStore(pool, "w", 10).claim()
    assert claim is not None
    assert claim.session == "s1"


async def test_partials_go_to_the_partials_topic_never_to_the_ledger(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    session: tuple[str, str],
) -> None:
    async with worker_task(database_dsn, kafka=kafka.settings, topic_prefix=topic_prefix):
        await say(ledger, "one two three", "r1")
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    assert [e.kind for e in events] == ["user.message", "assistant.message", "run.finished"]
    text = answers(events)[0].payload["content"][0]["text"]
    consumer_records = await _partials(kafka.bootstrap, PARTIALS.full_name(topic_prefix), 4)
    assert "".join(consumer_records) == text


async def _partials(bootstrap: str, topic: str, count: int) -> list[str]:
    import orjson
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, fetch_max_wait_ms=50, auto_offset_reset="earliest"
    )
    await consumer.start()
    deltas: list[tuple[int, str]] = []
    try:
        partitions = await topic_partitions(KafkaSettings(bootstrap), [topic])
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)

        async def enough() -> bool:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                for r in records:
                    frame = orjson.loads(r.value)
                    deltas.append((frame["index"], frame["delta"]))
            return len(deltas) >= count

        await wait_until(enough, 30, "the partial frames")
    finally:
        await consumer.stop()
    return [d for _, d in sorted(deltas)]


async def test_worker_sigkilled_mid_tool_call_is_taken_over_and_fenced(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes.txt"
    first = await WorkerProcess(database_dsn, tmp_path, KEEL_TOOL_NOTES_FILE=str(notes)).start()
    try:
        await say(ledger, '[[tool:note {"text": "side effect", "sleep_ms": 3000}]] note it', "r1")
        await tool_call_committed(ledger, "s1", timeout_s=60)
    finally:
        await first.signal(signal.SIGKILL)
    async with worker_task(database_dsn, builtins=BuiltinContext(notes)):
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    results = [e for e in events if e.kind == "tool.result"]
    calls = [
        b["id"] for e in answers(events) for b in e.payload["content"] if b["type"] == "toolCall"
    ]
    assert len(calls) == 1
    assert [r.payload["toolCallId"] for r in results] == calls, "exactly one result per call"
    assert notes.read_text().splitlines() == ["side effect"]
    epoch = await pool.fetchval("SELECT lease_epoch FROM runs WHERE session_id = 's1'")
    # Epoch 2 settled the attempt that died (its summary), epoch 3 ran the next attempt.
    assert epoch == 3, "the takeover raised the epoch"
    summaries = [e.payload for e in events if e.kind == "run.finished"]
    assert [(s["status"], s.get("abandonedEpoch")) for s in summaries] == [
        ("failed", 1),
        ("done", None),
    ]
    # The old worker, were it to come back, commits with its old lease: fenced.
    with pytest.raises(LeaseFenced):
        await ledger.commit(
            CommitRequest(
                tenant_id="acme",
                session_id="s1",
                kind="tool.result",
                payload={"toolCallId": calls[0], "content": []},
                lease=LeaseToken(owner=first_owner(first), epoch=1),
            )
        )
    assert_each_input_answered_once(events)


def first_owner(process: WorkerProcess) -> str:
    import socket

    assert process.process is not None
    return f"{socket.gethostname()}:{process.process.pid}"


async def test_sigterm_during_a_run_loses_and_repeats_no_input(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    tmp_path: Path,
    one_summary_per_attempt: set[tuple[str, int]],
) -> None:
    one_summary_per_attempt.add(("s1", 1))  # drained: released, not settled
    first = await WorkerProcess(database_dsn, tmp_path, KEEL_WORKER_DRAIN_GRACE_S="0.5").start()
    try:
        await say(ledger, '[[tool:sleep {"seconds": 4}]] wait for it', "r1")
        await tool_call_committed(ledger, "s1", timeout_s=60)
        second_input = await say(ledger, "and then?", "r2")
    finally:
        assert await first.signal(signal.SIGTERM) == 0
    assert await run_status(pool, "s1") == "pending", "the drained attempt was released"
    async with worker_task(database_dsn):
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    assert_each_input_answered_once(events)
    assert second_input in answers(events)[-1].payload["inputSeqs"]
    assert account_inputs(events).unanswered == ()


async def test_input_committed_while_an_attempt_settles_is_not_left_behind(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    from keel_stream.kernel import RunStatus
    from keel_stream.store.protocol import Settlement

    await say(ledger, "first", "r1")
    runs = RunStore(pool, "w", 10)
    claim = await runs.claim()
    assert claim is not None
    await say(ledger, "arrived late", "r2")  # after the worker's last read of the log
    settlement = Settlement(
        RunStatus.DONE, read_watermark=1, accounted_through=1, fresh_budget=True
    )
    assert await runs.settle(claim, settlement) is RunStatus.PENDING
    assert await run_status(pool, "s1") == "pending", "the late input must get its run"


async def test_a_failing_tool_is_an_error_result_not_a_stuck_run(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn):
        await say(ledger, '[[tool:sleep {"seconds": "soon"}]] wait', "r1")
        await settled(pool, "s1", "done")
    events = await log_of(ledger, "s1")
    (result,) = [e for e in events if e.kind == "tool.result"]
    assert result.payload["isError"] is True
    assert "'soon' is not of type 'number'" in result.payload["content"][0]["text"]
    assert_each_input_answered_once(events)


async def test_a_cancel_survives_a_takeover(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    await say(ledger, "work", "r1")
    first = await RunStore(pool, "w1", 0.1).claim()
    assert first is not None
    assert await RunStore(pool, "api", 1).request_cancel("acme", "s1")

    async def expired() -> bool:
        return bool(
            await pool.fetchval("SELECT lease_expires_at < now() FROM runs WHERE session_id='s1'")
        )

    await wait_until(expired, 10, "the first lease to expire")
    second_runs = RunStore(pool, "w2", 10)
    second = await second_runs.claim()
    assert second is not None
    assert second.lease.epoch == first.lease.epoch + 1
    beat = await second_runs.heartbeat(second)
    assert beat.cancel_requested, "the new owner must see the cancel"


def assert_cancelled_call_never_ran_again(events: list[Event], new_input: int) -> None:
    """The answer's one call got one result, an error saying it was cancelled, committed by the
    cancelled attempt; no later attempt ran it (no timing, no other result); the new input was
    answered after it."""
    (call,) = [b for e in answers(events) for b in e.payload["content"] if b["type"] == "toolCall"]
    (result,) = [e for e in events if e.kind == "tool.result"]
    assert result.payload["toolCallId"] == call["id"]
    assert result.payload["isError"] is True
    assert "cancelled" in result.payload["content"][0]["text"]
    summaries = [e for e in events if e.kind == "run.finished"]
    assert [s.payload["status"] for s in summaries] == ["cancelled", "done"]
    assert result.seq < summaries[0].seq, "the cancelled attempt closed its call"
    assert [t for s in summaries for t in s.payload["toolTimings"]] == [], "the call ran again"
    final = answers(events)[-1]
    assert (final.payload["inputSeqs"], final.payload["stopReason"]) == ([new_input], "end_turn")


async def test_a_cancelled_tool_call_is_never_run_again(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with worker_task(database_dsn):
        await say(ledger, '[[tool:sleep {"seconds": 5}]] wait for it', "r1")
        await tool_call_committed(ledger, "s1")
        assert await RunStore(pool, "api", 1).request_cancel("acme", "s1")
        await settled(pool, "s1", "failed")
        new_input = await say(ledger, "are you there", "r2")
        await settled(pool, "s1", "done", "failed")
    assert_cancelled_call_never_ran_again(await log_of(ledger, "s1"), new_input)


async def test_a_cancelled_tool_call_is_not_run_by_the_takeover_of_a_dead_worker(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    tmp_path: Path,
) -> None:
    first = await WorkerProcess(database_dsn, tmp_path).start()
    try:
        await say(ledger, '[[tool:sleep {"seconds": 5}]] wait for it', "r1")
        await tool_call_committed(ledger, "s1", timeout_s=60)
        assert first.process is not None
        first.process.send_signal(signal.SIGSTOP)  # frozen mid-call: it never sees the cancel
        assert await RunStore(pool, "api", 1).request_cancel("acme", "s1")
    finally:
        await first.signal(signal.SIGKILL)
    async with worker_task(database_dsn):
        await settled(pool, "s1", "failed")
        new_input = await say(ledger, "are you there", "r2")
        await settled(pool, "s1", "done", "failed")
    events = await log_of(ledger, "s1")
    assert_cancelled_call_never_ran_again(events, new_input)
    summaries = [e.payload for e in events if e.kind == "run.finished"]
    assert [s.get("abandonedEpoch") for s in summaries] == [1, None]
