"""The dispatcher's batches against real PostgreSQL: duplicates write nothing, gaps and claim
checks are read from the ledger, and a subscription gets only what was committed after it."""

from __future__ import annotations

import asyncpg
import orjson

from keel_stream.hooks.dispatcher import Dispatcher
from keel_stream.hooks.envelope import new_secret
from keel_stream.kafka.records import EventRecordCodec
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.projector.events import SourceRecord, Undecodable, decode
from keel_stream.store import PostgresLedger
from keel_stream.store.hooks import PostgresHookStore
from keel_stream.store.hooks_dispatch import PostgresHookDispatchStore
from tests.support.ledger import converse


async def _records(
    ledger: PostgresLedger, seqs: list[int], claim_checked: int | None = None
) -> list[SourceRecord | Undecodable]:
    events = {e.seq: e for e in await ledger.read_events("acme", "s1", 0, 100)}
    records: list[SourceRecord | Undecodable] = []
    for offset, seq in enumerate(seqs):
        e = events[seq]
        if seq == claim_checked:
            details = {"reason": "too_large", "error": "MessageSizeTooLargeError"}
            record = EventRecordCodec.claim_check(
                "acme", "s1", seq, e.kind, e.committed_at, details
            )
        else:
            record = EventRecordCodec.encode("acme", "s1", seq, e.kind, e.payload, e.committed_at)
        records.append(decode(record.value, 0, offset))
    return records


async def _rows(pool: asyncpg.Pool) -> list[tuple[str, int]]:
    rows = await pool.fetch("SELECT hook, seq FROM hook_deliveries ORDER BY seq, hook")
    return [(r["hook"], r["seq"]) for r in rows]


async def test_duplicates_gaps_and_claim_checks(pool: asyncpg.Pool, ledger: PostgresLedger) -> None:
    await ledger.create_tenant("acme")
    await ledger.create_session("acme", "s1")
    store = PostgresHookStore(pool)
    names = ["turn.started", "turn.finished"]
    await store.create("acme", "http://127.0.0.1:9/", names, None, None, new_secret())
    await converse(ledger, pool, "s1", 2)  # seqs 1-10
    later = await store.create("acme", "http://127.0.0.1:9/", names, None, None, new_secret())
    dispatcher = Dispatcher(
        PostgresHookDispatchStore(pool), KafkaSettings("unused:9092"), "topic", "group"
    )

    assert await dispatcher.apply(await _records(ledger, [1, 2])) == 2
    # A relay duplicate (2), a gap (3 is missing), a claim check standing in for 7.
    batch = await _records(ledger, [2, 4, 5, 6, 7], claim_checked=7)
    batch.append(Undecodable(0, 99, b"not an event", "ValueError"))
    assert await dispatcher.apply(batch) == 4
    assert await dispatcher.apply(batch) == 0, "a redelivered batch writes nothing"
    assert await dispatcher.apply(await _records(ledger, [10])) == 2  # 8, 9 from the ledger
    assert await _rows(pool) == [
        ("turn.started", 1),
        ("turn.finished", 2),
        ("turn.started", 3),
        ("turn.finished", 4),
        ("turn.started", 6),
        ("turn.finished", 7),
        ("turn.started", 8),
        ("turn.finished", 9),
    ]
    fold = await pool.fetchrow("SELECT last_seq, state FROM hook_folds")
    assert fold is not None
    assert fold["last_seq"] == 10
    assert fold["state"]["open"] is False
    bodies = await pool.fetch("SELECT body, hook_id FROM hook_deliveries")
    assert later.id not in {r["hook_id"] for r in bodies}, "nothing committed before it was made"
    finished_7 = [
        orjson.loads(r["body"])
        for r in bodies
        if orjson.loads(r["body"])["data"]["seq"] == 7
        and orjson.loads(r["body"])["type"] == "turn.finished"
    ]
    assert [b["data"]["stopReason"] for b in finished_7] == ["tool_use"], "read from the ledger"
