"""The transcript stored as rows in PostgreSQL: a batch writes only the rows it changed, reads
and rebuilds give the document the fold makes, migration 0032 moves stored documents into
rows, and pruning a generation deletes its rows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import asyncpg
import orjson

from keel_stream.kernel.types import Event
from keel_stream.projections import ALL, RUN_STATUS, TRANSCRIPT, fold
from keel_stream.projector.applier import Applier
from keel_stream.projector.events import SourceRecord
from keel_stream.projector.rebuild import rebuild
from keel_stream.relay.relay import RelayConfig
from keel_stream.store import PostgresLedger, connect, create_pool, migrate
from keel_stream.store.admin import PostgresAdmin
from keel_stream.store.projection_state import PostgresProjectionStore
from keel_stream.store.sqlfiles import migration_files
from tests.support.kafka import KafkaServer
from tests.support.ledger import converse, make_sessions, outbox_empty
from tests.support.relays import relay_task
from tests.support.wait import wait_until

TOPIC = "keel.events.v1"
T0 = datetime(2026, 12, 1, tzinfo=UTC)


def ev(seq: int, kind: str, **payload: Any) -> Event:
    return Event.trusted("acme", "s1", seq, kind, payload, T0)


def answer(seq: int, inputs: list[int], stop: str = "end_turn", call: str | None = None) -> Event:
    content: list[dict[str, Any]] = [{"type": "text", "text": f"answer {seq}"}]
    if call is not None:
        content.append({"type": "toolCall", "id": call, "name": "echo", "arguments": {}})
    return ev(seq, "assistant.message", content=content, inputSeqs=inputs, stopReason=stop)


LOG = [
    ev(1, "user.message", text="use a tool"),
    answer(2, [1], "tool_use", call="c2"),
    # a later batch: the result pairs with a call stored before, a guide waits
    ev(3, "tool.result", toolCallId="c2", content=[{"type": "text", "text": "ok"}]),
    ev(4, "user.message", text="a guide"),
    # a later batch: the guide enters the context after the result
    answer(5, [4]),
    ev(6, "run.finished", status="done", turns=2, durationMs=5),
    # a later batch: a compaction keeps the suffix from the result
    ev(7, "compaction", summary="so far", firstKeptSeq=3),
    ev(8, "user.message", text="more"),
    answer(9, [8]),
]
BATCHES = [LOG[:2], LOG[2:4], LOG[4:6], LOG[6:]]


def document(events: list[Event]) -> Any:
    return orjson.loads(orjson.dumps(TRANSCRIPT.dump(fold(TRANSCRIPT, events).state)))


async def rows(pool: asyncpg.Pool, generation: int = 1) -> dict[int, tuple[int | None, int]]:
    """seq -> (position, the transaction that wrote the row last)."""
    found = await pool.fetch(
        "SELECT seq, position, xmin::text::bigint AS written FROM transcript_entries"
        " WHERE generation = $1 AND session_id = 's1'",
        generation,
    )
    return {r["seq"]: (r["position"], r["written"]) for r in found}


async def test_a_batch_writes_only_the_rows_it_changes(pool: asyncpg.Pool) -> None:
    store = PostgresProjectionStore(pool)
    applier = Applier(store, ALL, TOPIC)
    offset = 0
    written: list[dict[int, tuple[int | None, int]]] = []
    for batch in BATCHES:
        await applier.apply([SourceRecord(e, 0, offset + i) for i, e in enumerate(batch)])
        offset += len(batch)
        written.append(await rows(pool))
        stored = await store.read_state("transcript", "acme", "s1")
        assert stored is not None
        applied = LOG[:offset]
        assert (stored.last_seq, stored.state) == (offset, document(applied))
    first, second, third, _ = written
    assert (second[1], second[2]) == (first[1], first[2]), "earlier rows stay as they are"
    assert second[4][0] is None, "the guide waits: no place in the context yet"
    assert third[4][0] == 3, "the guide's row moved into the context"
    assert third[4][1] != second[4][1]
    assert third[3] == second[3], "the result's row stays"
    assert set(third) == {1, 2, 3, 4, 5}, "run.finished is no entry"
    head = await pool.fetchval(
        "SELECT state FROM projection_states WHERE projection = 'transcript'"
    )
    assert head == {"waiting": [], "contextEnd": 7}, "the head is small: no entries in it"


async def test_a_document_stored_before_is_written_as_rows_by_the_next_batch(
    pool: asyncpg.Pool,
) -> None:
    before = document(LOG[:4])
    await pool.execute(
        "INSERT INTO projection_states (projection, generation, tenant_id, session_id,"
        " last_seq, state) VALUES ('transcript', 1, 'acme', 's1', 4, $1)",
        before,
    )
    store = PostgresProjectionStore(pool)
    stored = await store.read_state("transcript", "acme", "s1")
    assert stored is not None
    assert stored.state == before, "a document reads as it is"
    await Applier(store, ALL, TOPIC).apply(
        [SourceRecord(e, 0, 4 + i) for i, e in enumerate(LOG[4:])]
    )
    stored = await store.read_state("transcript", "acme", "s1")
    assert stored is not None
    assert stored.state == document(LOG)
    assert set(await rows(pool)) == {1, 2, 3, 4, 5, 7, 8, 9}


async def test_migration_0032_moves_stored_documents_into_rows(empty_database_dsn: str) -> None:
    conn = await connect(empty_database_dsn)
    try:
        files = migration_files()
        await migrate(conn, [f for f in files if int(f.name[:4]) < 32])
        stored = document(LOG)
        await conn.execute(
            "INSERT INTO projection_states (projection, generation, tenant_id, session_id,"
            " last_seq, state) VALUES ('transcript', 1, 'acme', 's1', 9, $1),"
            " ('run_status', 1, 'acme', 's1', 9, $2)",
            stored,
            RUN_STATUS.dump(fold(RUN_STATUS, LOG).state),
        )
        await migrate(conn)
        head = await conn.fetchval(
            "SELECT state FROM projection_states WHERE projection = 'transcript'"
        )
        assert head == {"waiting": [], "contextEnd": len(stored["context"])}
        assert await conn.fetchval("SELECT count(*) FROM transcript_entries") == 8
    finally:
        await conn.close()
    migrated = await create_pool(empty_database_dsn, max_size=2)
    try:
        read = await PostgresProjectionStore(migrated).read_state("transcript", "acme", "s1")
        assert read is not None
        assert read.state == stored
        other = await PostgresProjectionStore(migrated).read_state("run_status", "acme", "s1")
        assert other is not None
        assert other.last_seq == 9, "documents of the others stay"
    finally:
        await migrated.close()


async def test_a_rebuild_copies_its_rows_and_prune_deletes_the_old_ones(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
) -> None:
    sessions = await make_sessions(ledger, 3)
    store = PostgresProjectionStore(pool)
    live = Applier(store, ALL, TOPIC)
    for session in sessions:
        await converse(ledger, pool, session, cycles=4)
        await live.apply_events(await ledger.read_events("acme", session, after=0, limit=100))
    async with relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix)):
        await wait_until(lambda: outbox_empty(pool), 60, "the relay to publish")
    # Small flushes: positions of rows written by one flush move in the next.
    report = await rebuild(
        store, kafka.settings, "transcript", topic_prefix=topic_prefix, flush_every=7
    )
    assert report.generation == 2
    for session in sessions:
        events = await ledger.read_events("acme", session, after=0, limit=100)
        stored = await store.read_state("transcript", "acme", session)
        assert stored is not None
        assert (stored.last_seq, stored.state) == (len(events), document(list(events)))
    count = "SELECT count(*) FROM transcript_entries WHERE generation = $1"
    assert await pool.fetchval(count, 1) == await pool.fetchval(count, 2) > 0
    pruned = await PostgresAdmin(pool).prune("transcript")
    assert pruned.generations == 1
    assert await pool.fetchval(count, 1) == 0
    assert await pool.fetchval(count, 2) > 0, "the live generation's rows stay"
