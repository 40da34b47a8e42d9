"""`keel-stream verify` on the topic side: each kind of difference is found, and named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from keel_stream.kafka.read_all import RawRecord
from keel_stream.kafka.records import EventRecordCodec, record_key
from keel_stream.kernel.types import Event
from keel_stream.store.verify_reads import Scope
from keel_stream.verify.report import Check, Tally
from keel_stream.verify.topic import TopicIndex, check_session

KEY = ("acme", "s1")
T0 = datetime(2026, 11, 30, 5, 24, 36, 321827, tzinfo=UTC)


def event(seq: int, text: str | None = None, tenant: str = "acme", session: str = "s1") -> Event:
    payload: dict[str, Any] = {"text": text or f"message {seq}", "n": [seq, 1.5]}
    return Event.trusted(tenant, session, seq, "user.message", payload, T0 + timedelta(seconds=seq))


def record(e: Event, partition: int, offset: int, key: bytes | None = None) -> RawRecord:
    out = EventRecordCodec.encode(e.tenant, e.session, e.seq, e.kind, e.payload, e.committed_at)
    return RawRecord(partition, offset, out.key if key is None else key, out.value)


def run(
    ledger: list[Event],
    records: list[RawRecord],
    *,
    head: int | None = None,
    pending: tuple[int, ...] = (),
    fail_on_duplicates: bool = False,
    scope: Scope | None = None,
) -> Tally:
    tally = Tally(projections=(), fail_on_duplicates=fail_on_duplicates)
    index = TopicIndex(scope or Scope(), tally)
    index.add(records)
    check_session(
        KEY, ledger, len(ledger) if head is None else head, pending, index.pop(KEY), tally
    )
    return tally


def checks(tally: Tally) -> dict[Check, list[int | None]]:
    found: dict[Check, list[int | None]] = {}
    for difference in (*tally.failures, *tally.notes):
        found.setdefault(difference.check, []).append(difference.seq)
    return found


def test_a_topic_equal_to_the_ledger_has_no_difference() -> None:
    ledger = [event(n) for n in range(1, 6)]
    tally = run(ledger, [record(e, 2, i) for i, e in enumerate(ledger)])
    report = tally.report("keel.events.v1", 0.0)
    assert report.ok
    assert report.failed == 0
    assert (tally.records, checks(tally)) == (5, {})


def test_a_ledger_event_not_on_the_topic_is_missing_by_seq() -> None:
    ledger = [event(n) for n in range(1, 6)]
    tally = run(ledger, [record(e, 0, i) for i, e in enumerate(ledger) if e.seq != 3])
    assert checks(tally) == {Check.MISSING: [3]}
    assert "seq=3" in tally.failures[0].line()
    assert "session=s1" in tally.failures[0].line()
    assert not tally.report("t", 0.0).ok


def test_events_still_in_the_outbox_are_pending_not_missing() -> None:
    ledger = [event(n) for n in range(1, 6)]
    tally = run(ledger, [record(e, 0, i) for i, e in enumerate(ledger[:3])], pending=(4, 5))
    assert checks(tally) == {Check.PENDING: [4]}
    assert tally.count(Check.PENDING) == 2
    assert tally.report("t", 0.0).ok


def test_events_committed_after_the_snapshot_are_not_expected() -> None:
    ledger = [event(n) for n in range(1, 6)]
    tally = run(ledger, [record(e, 0, i) for i, e in enumerate(ledger[:3])], head=3)
    assert checks(tally) == {}


def test_a_duplicate_is_counted_and_allowed_unless_asked_to_fail() -> None:
    ledger = [event(n) for n in range(1, 4)]
    records = [record(e, 1, i) for i, e in enumerate(ledger)] + [record(ledger[1], 1, 3)]
    allowed = run(ledger, records)
    assert checks(allowed) == {Check.DUPLICATE: [2]}
    assert allowed.report("t", 0.0).ok
    assert ("duplicates", 1, "allowed") in [(r.check, r.count, r.result) for r in allowed._rows()]
    strict = run(ledger, records, fail_on_duplicates=True)
    assert not strict.report("t", 0.0).ok


def test_a_seq_after_a_higher_one_is_out_of_order() -> None:
    ledger = [event(n) for n in range(1, 5)]
    order = [ledger[0], ledger[2], ledger[1], ledger[3]]
    tally = run(ledger, [record(e, 0, i) for i, e in enumerate(order)])
    assert checks(tally) == {Check.OUT_OF_ORDER: [2]}


def test_a_session_in_two_partitions_is_out_of_order() -> None:
    ledger = [event(n) for n in range(1, 3)]
    tally = run(ledger, [record(ledger[0], 0, 0), record(ledger[1], 4, 0)])
    assert checks(tally) == {Check.OUT_OF_ORDER: [None]}


def test_a_record_the_ledger_lacks_is_extra() -> None:
    ledger = [event(n) for n in range(1, 3)]
    tally = run(ledger, [record(e, 0, i) for i, e in enumerate([*ledger, event(9)])])
    assert checks(tally) == {Check.EXTRA: [9]}


def test_a_record_with_another_payload_kind_time_or_key_differs() -> None:
    ledger = [event(n) for n in range(1, 5)]
    changed = [
        event(1, text="tampered"),
        Event.trusted(
            "acme", "s1", 2, "assistant.message", ledger[1].payload, ledger[1].committed_at
        ),
        Event.trusted("acme", "s1", 3, "user.message", ledger[2].payload, T0),
    ]
    records = [record(e, 0, i) for i, e in enumerate(changed)]
    records.append(record(ledger[3], 0, 3, key=record_key("acme", "other")))
    tally = run(ledger, records)
    assert checks(tally) == {Check.DIFFERS: [1, 2, 3, 4]}
    details = [d.detail for d in tally.failures]
    assert "payload" in details[0]
    assert "kind 'assistant.message'" in details[1]
    assert "committedAt" in details[2]
    assert "record key" in details[3]


def test_payloads_compare_as_json_whatever_the_key_order() -> None:
    ledger = [Event.trusted("acme", "s1", 1, "user.message", {"a": 1, "b": {"x": 2, "y": 3}}, T0)]
    value = (
        b'{"tenant":"acme","session":"s1","seq":1,"kind":"user.message",'
        b'"payload":{"b":{"y":3,"x":2},"a":1},"committedAt":"2026-11-30T05:24:36.321827Z"}'
    )
    tally = run(ledger, [RawRecord(0, 0, record_key("acme", "s1"), value)])
    assert checks(tally) == {}


def test_a_claim_check_stands_in_for_its_payload_but_not_its_envelope() -> None:
    ledger = [event(n) for n in range(1, 4)]
    records = [record(ledger[0], 0, 0)]
    for offset, (e, stamp) in enumerate(
        [(ledger[1], ledger[1].committed_at), (ledger[2], T0)], start=1
    ):
        check = EventRecordCodec.claim_check(
            "acme", "s1", e.seq, e.kind, stamp, {"reason": "too_large", "payloadBytes": 2_000_000}
        )
        records.append(RawRecord(0, offset, check.key, check.value))
    tally = run(ledger, records)
    assert checks(tally) == {Check.CLAIM_CHECK: [2, 3], Check.DIFFERS: [3]}
    assert "too_large" in tally.notes[0].detail
    assert "committedAt" in tally.failures[0].detail
    assert "payload" not in tally.failures[0].detail


def test_a_record_that_is_no_event_is_extra() -> None:
    tally = run([], [RawRecord(3, 7, record_key("acme", "s1"), b"not json")], head=0)
    assert checks(tally) == {Check.EXTRA: [None]}
    assert "partition 3 offset 7" in tally.failures[0].detail


def test_records_outside_the_scope_are_left_out() -> None:
    mine, theirs = event(1), event(1, session="s2")
    tally = run([mine], [record(mine, 0, 0), record(theirs, 1, 0)], scope=Scope("acme", "s1"))
    assert tally.records == 1
    assert checks(tally) == {}


def test_the_listing_is_capped_and_the_count_is_whole() -> None:
    ledger = [event(n) for n in range(1, 301)]
    tally = Tally(projections=(), keep=10)
    check_session(KEY, ledger, 300, (), [], tally)
    report = tally.report("t", 0.0)
    assert (report.failed, len(report.failures), report.unlisted) == (300, 10, 290)
