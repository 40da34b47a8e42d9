"""The read side with a real Faust worker: read models equal a direct fold over the ledger."""

from __future__ import annotations

import asyncio
import random
import signal
from pathlib import Path

import asyncpg
import pytest

from keel_stream.errors import (
    InvalidPage,
    ProjectionBehind,
    SessionNotFound,
    UnknownProjection,
)
from keel_stream.kernel import CommitRequest
from keel_stream.projections import TRANSCRIPT, fold
from keel_stream.projector.rebuild import rebuild
from keel_stream.readmodels import ReadModels
from keel_stream.relay import RelayConfig
from keel_stream.store.postgres import PostgresLedger
from keel_stream.store.projection_state import PostgresProjectionStore
from tests.support.cli import run_keel
from tests.support.kafka import KafkaServer
from tests.support.ledger import converse_all, make_sessions, outbox_empty
from tests.support.projector import (
    ProjectorProcess,
    ledger_events,
    live_states,
    models_equal_ledger_fold,
    projector,
    stored_offsets,
)
from tests.support.relays import relay_task
from tests.support.wait import wait_until

CONVERGE_S = 120


async def test_2000_events_fold_into_models_equal_to_the_ledger(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    sessions = await make_sessions(ledger, 20)
    async with (
        relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix)),
        projector(database_dsn, kafka.bootstrap, topic_prefix, tmp_path),
    ):
        await converse_all(ledger, pool, sessions, cycles=20)  # 20 x 5 x 20 = 2,000 events
        assert await pool.fetchval("SELECT count(*) FROM events") == 2000
        await wait_until(
            lambda: models_equal_ledger_fold(pool), CONVERGE_S, "models equal to the ledger fold"
        )
        models = ReadModels(PostgresProjectionStore(pool), PostgresLedger(pool))
        await models.start()
        try:
            view = await models.get("run_status", "acme", sessions[0], min_seq=100, timeout_s=10)
            assert view.state["status"] == "done"
            assert view.state["attempts"] == 20
            assert view.state["unansweredInputs"] == []
            transcript = await models.get("transcript", "acme", sessions[0])
            assert transcript.last_seq == 100
            assert len(transcript.state["entries"]) == 80  # run.finished is skipped
        finally:
            await models.close()


async def test_worker_sigkilled_mid_stream_still_converges(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    sessions = await make_sessions(ledger, 10)
    async with relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix)):
        first = await ProjectorProcess(
            database_dsn, kafka.bootstrap, topic_prefix, tmp_path
        ).start()
        try:
            await converse_all(ledger, pool, sessions, cycles=2)
            await wait_until(lambda: models_equal_ledger_fold(pool), CONVERGE_S, "a ready worker")
            writing = asyncio.create_task(
                converse_all(ledger, pool, sessions, cycles=28, start=2, pace_s=0.1)
            )

            async def more_applied() -> bool:
                n = await pool.fetchval(
                    "SELECT count(*) FROM projection_states WHERE last_seq > 30"
                )
                return bool(n > 0)

            await wait_until(more_applied, CONVERGE_S, "the worker to apply more events")
            assert not writing.done(), "the kill must land mid-stream"
        finally:
            await first.stop(signal.SIGKILL)
        stored = await stored_offsets(pool)
        async with projector(database_dsn, kafka.bootstrap, topic_prefix, tmp_path) as second:
            await writing
            await wait_until(
                lambda: models_equal_ledger_fold(pool), CONVERGE_S, "convergence after restart"
            )
        # The restarted worker resumed each partition exactly at the offset stored with the
        # read models: nothing before it was read again, nothing after it skipped.
        first_records = second.first_records()
        assert first_records, "the restarted worker must have consumed records"
        for partition, offset in first_records.items():
            assert offset == stored.get(partition, 0), (partition, offset, stored)


async def test_records_never_published_are_healed_from_the_ledger(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    sessions = await make_sessions(ledger, 10)
    await converse_all(ledger, pool, sessions, cycles=10)  # relay stopped: all in the outbox
    ids = [r["id"] for r in await pool.fetch("SELECT id FROM outbox")]
    never = random.Random(7).sample(ids, k=len(ids) // 5)
    # A fifth of the events never reach the topic, including some session tails.
    await pool.execute("DELETE FROM outbox WHERE id = ANY($1::bigint[])", never)
    last_seqs = await pool.fetch(
        "SELECT o.id FROM outbox o JOIN sessions s USING (tenant_id, session_id)"
        " WHERE o.seq = s.last_seq LIMIT 3"
    )
    await pool.execute(
        "DELETE FROM outbox WHERE id = ANY($1::bigint[])", [r["id"] for r in last_seqs]
    )
    async with (
        relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix)),
        projector(database_dsn, kafka.bootstrap, topic_prefix, tmp_path),
    ):
        await wait_until(lambda: outbox_empty(pool), CONVERGE_S, "the relay to publish the rest")
        await wait_until(
            lambda: models_equal_ledger_fold(pool), CONVERGE_S, "gap-fill and reconcile to heal"
        )


async def test_rebuild_equals_live_and_readers_never_see_a_partial_model(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    sessions = await make_sessions(ledger, 10)
    async with (
        relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix)),
        projector(database_dsn, kafka.bootstrap, topic_prefix, tmp_path),
    ):
        await converse_all(ledger, pool, sessions, cycles=10)
        await wait_until(lambda: models_equal_ledger_fold(pool), CONVERGE_S, "live convergence")
        live_before = await live_states(pool, "transcript")
        history = await ledger_events(pool)
        violations: list[str] = []
        reading = True
        models = ReadModels(PostgresProjectionStore(pool), PostgresLedger(pool))

        async def reader() -> None:
            seen: dict[str, int] = {}
            while reading:
                for session in sessions:
                    view = await models.get("transcript", "acme", session)
                    expected = fold(TRANSCRIPT, history[("acme", session)][: view.last_seq])
                    if view.last_seq < seen.get(session, 0) or view.last_seq == 0:
                        violations.append(f"{session}: went back to {view.last_seq}")
                    elif view.state != TRANSCRIPT.dump(expected.state):
                        violations.append(f"{session}: state differs at {view.last_seq}")
                    seen[session] = view.last_seq
                await asyncio.sleep(0)

        reading_task = asyncio.create_task(reader())
        report = await rebuild(
            PostgresProjectionStore(pool), kafka.settings, "transcript", topic_prefix=topic_prefix
        )
        await asyncio.sleep(0.2)  # let the reader read the switched generation a few times
        reading = False
        await reading_task
        assert violations == []
        assert report.generation == 2
        assert report.events >= 500
        generations = await pool.fetch(
            "SELECT generation, status FROM projection_generations"
            " WHERE projection = 'transcript' ORDER BY generation"
        )
        assert [(g["generation"], g["status"]) for g in generations] == [
            (1, "retired"),
            (2, "live"),
        ]
        assert await live_states(pool, "transcript") == live_before
        assert await models_equal_ledger_fold(pool)


async def test_a_batch_that_can_never_apply_stops_the_worker_loudly(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    sessions = await make_sessions(ledger, 2)
    # With no live transcript generation, no batch can apply however often it is retried: the
    # worker must exit non-zero with the cause rather than stall its partitions retrying.
    await pool.execute(
        "UPDATE projection_generations SET status = 'retired' WHERE projection = 'transcript'"
    )
    async with relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix)):
        worker = await ProjectorProcess(
            database_dsn, kafka.bootstrap, topic_prefix, tmp_path
        ).start()
        try:
            await converse_all(ledger, pool, sessions, cycles=1)
            assert worker.process is not None
            status = await asyncio.wait_for(worker.process.wait(), CONVERGE_S)
        finally:
            await worker.stop(signal.SIGKILL)
    assert status != 0
    assert "has no live generation" in worker.log.read_text()


async def test_read_models_errors(
    ledger: PostgresLedger, pool: asyncpg.Pool, session: tuple[str, str]
) -> None:
    await ledger.commit(
        CommitRequest(tenant_id="acme", session_id="s1", kind="user.message", payload={})
    )
    models = ReadModels(PostgresProjectionStore(pool), PostgresLedger(pool))
    with pytest.raises(UnknownProjection):
        await models.get("nope", "acme", "s1")
    with pytest.raises(SessionNotFound):
        await models.get("transcript", "acme", "missing")
    empty = await models.get("transcript", "acme", "s1")
    assert (empty.last_seq, empty.state["entries"]) == (0, [])
    with pytest.raises(ProjectionBehind) as info:
        await models.get("transcript", "acme", "s1", min_seq=1, timeout_s=0.3)
    assert info.value.retriable
    with pytest.raises(InvalidPage):
        await models.get("transcript", "acme", "s1", min_seq=2)


async def test_rebuild_and_status_commands(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    sessions = await make_sessions(ledger, 3)
    await converse_all(ledger, pool, sessions, cycles=4)
    async with relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix)):
        await wait_until(lambda: outbox_empty(pool), CONVERGE_S, "the relay to publish")
    env = {
        "KEEL_DATABASE_URL": database_dsn,
        "KEEL_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "KEEL_TOPIC_PREFIX": topic_prefix,
    }
    rebuilt = await run_keel("projections", "rebuild", "run_status", env=env)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert "run_status: generation 2 is live (60 events, 3 sessions" in rebuilt.stdout
    status = await run_keel("projections", "status", env=env)
    assert status.returncode == 0, status.stderr
    rows = [line.split() for line in status.stdout.splitlines()[1:]]
    run_status_rows = {(r[1], r[2]): r for r in rows if r[0] == "run_status"}
    assert run_status_rows[("2", "live")][3:6] == ["3", "0", "0"]  # sessions, behind, lag
    assert ("1", "retired") in run_status_rows
    again = await run_keel("projections", "rebuild", "run_status", env=env)
    assert "generation 3 is live" in again.stdout, again.stderr
    pruned = await run_keel("projections", "prune", "run_status", env=env)
    assert pruned.returncode == 0, pruned.stderr
    assert "pruned 2 retired generations (3 states)" in pruned.stdout  # gen 1 empty, gen 2 full
    generations = await pool.fetch(
        "SELECT generation, status FROM projection_generations WHERE projection = 'run_status'"
    )
    assert [(g["generation"], g["status"]) for g in generations] == [(3, "live")]
    assert (
        await pool.fetchval(
            "SELECT count(*) FROM projection_states WHERE projection = 'run_status'"
        )
        == 3
    )
    unknown = await run_keel("projections", "rebuild", "nope", env=env)
    assert unknown.returncode == 1
    assert "unknown_projection" in unknown.stderr
