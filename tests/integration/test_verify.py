"""`keel-stream verify` on real PostgreSQL and Kafka: clean on a healthy stack, and each kind of
difference named (session, seq, projection) with exit status 1."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import asyncpg
import orjson
from aiokafka import AIOKafkaProducer

from keel_stream.kafka.records import EventRecordCodec
from keel_stream.kernel import CommitRequest
from keel_stream.projections import ALL
from keel_stream.projector.rebuild import rebuild
from keel_stream.relay import RelayConfig
from keel_stream.store import PostgresLedger
from keel_stream.store.projection_state import PostgresProjectionStore
from keel_stream.topics.catalog import EVENTS
from tests.support.cli import Finished, one_line_error, run_keel
from tests.support.kafka import KafkaServer
from tests.support.ledger import converse_all, make_sessions, outbox_empty
from tests.support.projector import models_equal_ledger_fold, projector
from tests.support.relays import relay_task
from tests.support.wait import wait_until

CONVERGE_S = 120


def _env(database_dsn: str, kafka: KafkaServer, prefix: str, tmp_path: Path) -> dict[str, str]:
    return {
        "KEEL_DATABASE_URL": database_dsn,
        "KEEL_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "KEEL_TOPIC_PREFIX": prefix,
        "KEEL_DATA_DIR": str(tmp_path / "keel"),
    }


def rows(result: Finished) -> dict[str, list[str]]:
    """The summary table: check -> [count, result] (the check names hold spaces)."""
    table: dict[str, list[str]] = {}
    for line in result.stdout.splitlines()[1:]:
        if not line.strip():
            break
        words = line.split()
        number = next(i for i, w in enumerate(words) if w.isdigit())
        table[" ".join(words[:number])] = words[number:]
    return table


def lines_with(result: Finished, *parts: str) -> list[str]:
    return [line for line in result.stdout.splitlines() if all(p in line for p in parts)]


async def publish_all(
    database_dsn: str, kafka: KafkaServer, prefix: str, pool: asyncpg.Pool
) -> None:
    async with relay_task(RelayConfig(database_dsn, kafka.settings, prefix, poll_interval_s=0.2)):
        await wait_until(lambda: outbox_empty(pool), CONVERGE_S, "the relay to publish")


async def models_from_topic(pool: asyncpg.Pool, kafka: KafkaServer, prefix: str) -> None:
    """Every read model rebuilt from the topic and healed from the ledger (no Faust worker)."""
    for projection in ALL:
        await rebuild(
            PostgresProjectionStore(pool), kafka.settings, projection.name, topic_prefix=prefix
        )


async def produce(kafka: KafkaServer, prefix: str, *values: tuple[bytes, bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=kafka.bootstrap, acks="all")
    await producer.start()
    try:
        for key, value in values:
            await producer.send_and_wait(EVENTS.full_name(prefix), value, key=key)
    finally:
        await producer.stop()


async def ledger_record(
    pool: asyncpg.Pool, session: str, seq: int, *, as_seq: int | None = None, **changes: Any
) -> tuple[bytes, bytes]:
    """The record the relay wrote for an event, optionally as another seq or with changes."""
    row = await pool.fetchrow(
        "SELECT kind, payload, committed_at FROM events"
        " WHERE tenant_id = 'acme' AND session_id = $1 AND seq = $2",
        session,
        seq,
    )
    assert row is not None
    fields = {"kind": row["kind"], "payload": row["payload"], "committed_at": row["committed_at"]}
    fields.update(changes)
    out = EventRecordCodec.encode("acme", session, seq if as_seq is None else as_seq, **fields)
    return out.key, out.value


async def test_a_healthy_stack_verifies_clean_whole_and_filtered(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    sessions = await make_sessions(ledger, 4)
    await ledger.create_tenant("beta")
    await ledger.create_session("beta", "s00")
    async with (
        relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix, poll_interval_s=0.2)),
        projector(database_dsn, kafka.bootstrap, topic_prefix, tmp_path),
    ):
        await converse_all(ledger, pool, sessions, cycles=3)  # 4 x 3 x 5 = 60 events
        for n in range(2):
            await ledger.commit(
                CommitRequest(
                    tenant_id="beta",
                    session_id="s00",
                    kind="user.message",
                    payload={"text": f"b{n}"},
                )
            )
        await wait_until(lambda: outbox_empty(pool), CONVERGE_S, "the relay to publish")
        await wait_until(
            lambda: models_equal_ledger_fold(pool), CONVERGE_S, "models equal the ledger"
        )
        env = _env(database_dsn, kafka, topic_prefix, tmp_path)

        whole = await run_keel("verify", env=env)
        assert whole.returncode == 0, whole.stdout + whole.stderr
        table = rows(whole)
        assert table["sessions"] == ["5"]
        assert table["ledger events"] == ["62"]
        assert table["topic records"] == ["62"]
        for check in ("missing from the topic", "not in the ledger", "out of order", "duplicates"):
            assert table[check] == ["0", "ok"], check
        for projection in ("transcript", "run_status", "sse"):
            assert table[f"read model {projection} sessions"] == ["5"]
            assert table[f"read model {projection} differs"] == ["0", "ok"]
            assert table[f"read model {projection} behind"] == ["0", "ok"]
        assert whole.stdout.rstrip().endswith(f"verify {topic_prefix}keel.events.v1: ok")

        as_json = await run_keel("verify", "--json", env=env)
        assert as_json.returncode == 0, as_json.stderr
        document = orjson.loads(as_json.stdout)
        assert document["ok"] is True
        assert document["failures"] == []
        assert document["counts"] == {
            "sessions": 5,
            "events": 62,
            "records": 62,
            "pending": 0,
            "missing": 0,
            "extra": 0,
            "outOfOrder": 0,
            "differs": 0,
            "duplicates": 0,
            "claimChecks": 0,
        }
        assert document["readModels"]["transcript"] == {"sessions": 5, "differs": 0, "behind": 0}

        for args, sessions_seen, events in (
            (("--tenant", "beta"), "1", "2"),
            (("--tenant", "acme"), "4", "60"),
            (("--session", "s00"), "2", "17"),  # acme/s00 and beta/s00
            (("--tenant", "acme", "--session", "s01"), "1", "15"),
        ):
            filtered = await run_keel("verify", *args, env=env)
            assert filtered.returncode == 0, (args, filtered.stdout + filtered.stderr)
            table = rows(filtered)
            assert (table["sessions"], table["ledger events"]) == ([sessions_seen], [events]), args
            assert table["topic records"] == [events], args

        # Commits keep arriving while it runs: what came after its snapshot is not required.
        writing = asyncio.create_task(
            converse_all(ledger, pool, sessions, cycles=6, start=3, pace_s=0.5)
        )
        try:
            busy = await run_keel("verify", env=env)
        finally:
            await writing
        assert busy.returncode == 0, busy.stdout + busy.stderr


async def test_a_tampered_read_model_and_one_behind_are_named(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    sessions = await make_sessions(ledger, 3)
    await converse_all(ledger, pool, sessions, cycles=2)
    await publish_all(database_dsn, kafka, topic_prefix, pool)
    await models_from_topic(pool, kafka, topic_prefix)
    env = _env(database_dsn, kafka, topic_prefix, tmp_path)
    clean = await run_keel("verify", "--wait", "1", env=env)
    assert clean.returncode == 0, clean.stdout + clean.stderr

    live = (
        "(SELECT generation FROM projection_generations"
        " WHERE projection = p.projection AND status = 'live')"
    )
    await pool.execute(  # an entry's field that no context message carries
        "UPDATE transcript_entries AS p"
        ' SET entry = (entry::jsonb || \'{"delivery": "tampered"}\')::json'
        " WHERE session_id = 's01' AND seq = 1"
        " AND generation = (SELECT generation FROM projection_generations"
        " WHERE projection = 'transcript' AND status = 'live')"
    )
    await pool.execute(
        "DELETE FROM projection_states AS p"
        f" WHERE projection = 'sse' AND session_id = 's02' AND generation = {live}"
    )
    failed = await run_keel("verify", "--wait", "1", env=env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    table = rows(failed)
    assert table["read model transcript differs"] == ["1", "FAIL"]
    assert table["read model sse behind"] == ["1", "FAIL"]
    assert table["read model run_status differs"] == ["0", "ok"]
    assert table["missing from the topic"] == ["0", "ok"]
    (differs,) = lines_with(failed, "model_differs")
    assert "tenant=acme session=s01 seq=10 projection=transcript" in differs
    assert "fields: entries" in differs
    (behind,) = lines_with(failed, "model_behind")
    assert "tenant=acme session=s02 seq=0 projection=sse" in behind
    assert "ledger head was 10" in behind
    assert "FAILED (2 differences)" in failed.stdout

    only_s00 = await run_keel("verify", "--tenant", "acme", "--session", "s00", env=env)
    assert only_s00.returncode == 0, only_s00.stdout


async def test_an_event_missing_from_the_topic_is_named_by_its_seq(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    sessions = await make_sessions(ledger, 2)
    await converse_all(ledger, pool, sessions, cycles=1)
    # The relay never sees this row: seq 3 of s01 is committed but never published.
    deleted = await pool.execute("DELETE FROM outbox WHERE session_id = 's01' AND seq = 3")
    assert deleted == "DELETE 1"
    await publish_all(database_dsn, kafka, topic_prefix, pool)
    await models_from_topic(pool, kafka, topic_prefix)  # heals seq 3 from the ledger
    env = _env(database_dsn, kafka, topic_prefix, tmp_path)

    failed = await run_keel("verify", env=env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    table = rows(failed)
    assert table["missing from the topic"] == ["1", "FAIL"]
    assert table["ledger events"] == ["10"]
    assert table["topic records"] == ["9"]
    assert table["read model transcript differs"] == ["0", "ok"]
    (missing,) = lines_with(failed, "missing", "seq=")
    assert "tenant=acme session=s01 seq=3" in missing

    document = orjson.loads((await run_keel("verify", "--json", env=env)).stdout)
    assert document["ok"] is False
    assert [(f["check"], f["session"], f["seq"]) for f in document["failures"]] == [
        ("missing", "s01", 3)
    ]
    other = await run_keel("verify", "--tenant", "acme", "--session", "s00", env=env)
    assert other.returncode == 0, other.stdout


async def test_duplicates_are_counted_and_allowed_an_extra_record_fails(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    sessions = await make_sessions(ledger, 2)
    await converse_all(ledger, pool, sessions, cycles=1)
    await publish_all(database_dsn, kafka, topic_prefix, pool)
    await models_from_topic(pool, kafka, topic_prefix)
    await produce(kafka, topic_prefix, await ledger_record(pool, "s00", 2))  # a re-send
    env = _env(database_dsn, kafka, topic_prefix, tmp_path)

    allowed = await run_keel("verify", env=env)
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert rows(allowed)["duplicates"] == ["1", "allowed"]
    (duplicate,) = lines_with(allowed, "duplicate", "session=s00 seq=2")
    assert "repeats offset" in duplicate
    strict = await run_keel("verify", "--fail-on-duplicates", env=env)
    assert strict.returncode == 1, strict.stdout
    assert rows(strict)["duplicates"] == ["1", "FAIL"]

    await produce(
        kafka,
        topic_prefix,
        await ledger_record(pool, "s01", 5, as_seq=6),  # a seq the ledger does not have
        await ledger_record(pool, "s01", 4, payload={"tampered": True}),
    )
    failed = await run_keel("verify", env=env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    table = rows(failed)
    assert table["not in the ledger"] == ["1", "FAIL"]
    assert table["differs from the ledger"] == ["1", "FAIL"]
    assert table["duplicates"] == ["2", "allowed"]  # s01 seq 4 came a second time
    assert lines_with(failed, "extra", "tenant=acme session=s01 seq=6")
    (differs,) = lines_with(failed, "differs", "session=s01 seq=4")
    assert "payload" in differs


async def test_events_still_in_the_outbox_are_pending_not_missing(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    sessions = await make_sessions(ledger, 1)
    await converse_all(ledger, pool, sessions, cycles=1)
    await models_from_topic(pool, kafka, topic_prefix)  # the empty topic, healed from the ledger
    env = _env(database_dsn, kafka, topic_prefix, tmp_path)

    result = await run_keel("verify", "--wait", "0.5", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    table = rows(result)
    assert table["pending in the outbox"] == ["5"]
    assert table["missing from the topic"] == ["0", "ok"]
    (pending,) = lines_with(result, "pending", "session=s00 seq=1")
    assert "5 events still in the outbox (seqs 1..5)" in pending


async def test_unknown_scope_and_missing_settings_fail_in_one_line(
    ledger: PostgresLedger, database_dsn: str, kafka: KafkaServer, topic_prefix: str, tmp_path: Path
) -> None:
    await make_sessions(ledger, 1)
    env = _env(database_dsn, kafka, topic_prefix, tmp_path)
    unknown_session = await run_keel("verify", "--tenant", "acme", "--session", "nope", env=env)
    assert "'nope'" in one_line_error(unknown_session, "session_not_found", 1)
    unknown_tenant = await run_keel("verify", "--tenant", "nobody", env=env)
    one_line_error(unknown_tenant, "tenant_not_found", 1)
    no_database = await run_keel("verify", env={**env, "KEEL_DATABASE_URL": ""})
    one_line_error(no_database, "missing_database_url", 2)
    no_topic = await run_keel("verify", env={**env, "KEEL_TOPIC_PREFIX": f"{topic_prefix}none."})
    one_line_error(no_topic, "topic_missing", 1)
