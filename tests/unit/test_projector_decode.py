"""What the projector's hot path does without pydantic gives what pydantic gave: records decode to
events with the kernel's fields, SSE frames render to the same bytes, and a session's events in
order are gathered as they are."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from keel_stream.kafka.records import EventRecordCodec
from keel_stream.kernel.types import Event
from keel_stream.projections.sse import frame_json, render_frame
from keel_stream.projector.events import DecodedEvent, SourceRecord, Undecodable, decode, gather

T0 = datetime(2026, 12, 1, 10, 11, 12, 345678, tzinfo=UTC)
PAYLOADS: list[dict[str, Any]] = [
    {"text": "héllo ✓ \u2028 \n", "requestId": None},
    {"n": 1.5, "big": 10**18, "f": 1e16, "l": [None, True, {"a": []}]},
    {},
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_record_decodes_to_the_fields_of_its_event(payload: dict[str, Any]) -> None:
    record = EventRecordCodec.encode("acme", "s1", 7, "user.message", payload, T0)
    decoded = decode(record.value, 2, 40)
    assert isinstance(decoded, SourceRecord)
    event, kernel = decoded.event, Event.from_record(record.value)
    assert (decoded.partition, decoded.offset) == (2, 40)
    assert (event.tenant, event.session, event.seq, event.kind, event.payload) == (
        kernel.tenant,
        kernel.session,
        kernel.seq,
        kernel.kind,
        kernel.payload,
    )
    assert event.key == kernel.key
    assert datetime.fromisoformat(str(event.committed_at)) == kernel.committed_at


@pytest.mark.parametrize("payload", PAYLOADS)
def test_a_frame_renders_to_the_bytes_pydantic_gave(payload: dict[str, Any]) -> None:
    record = EventRecordCodec.encode("acme", "s1", 7, "user.message", payload, T0)
    kernel = Event.from_record(record.value)
    decoded = DecodedEvent.of(record.value)
    expected = render_frame(kernel, kernel.committed_at).model_dump_json().encode()
    assert frame_json(kernel, kernel.committed_at) == expected
    assert frame_json(decoded, decoded.committed_at) == expected, "the record's own stamp"


@pytest.mark.parametrize(
    "value",
    [
        b"{not json",
        b"[1, 2]",
        b'{"tenant": "acme", "session": "s1", "seq": 1, "kind": "x", "payload": {}}',
        b'{"tenant": "acme", "session": "s1", "seq": 1, "kind": "x", "payload": {},'
        b' "committedAt": 5}',
        b'{"tenant": "acme", "session": "s1", "seq": 0, "kind": "x", "payload": {},'
        b' "committedAt": "2026-12-01T00:00:00Z"}',
    ],
)
def test_what_is_not_an_event_is_undecodable(value: bytes) -> None:
    assert isinstance(decode(value, 0, 1), Undecodable)


class NoLedger:
    async def ledger_range(self, *args: object) -> list[Event]:
        raise AssertionError("events in order need nothing from the ledger")


async def test_events_in_order_are_gathered_as_they_are() -> None:
    events = [Event.trusted("acme", "s1", seq, "user.message", {}, T0) for seq in (4, 5, 6)]
    assert await gather(NoLedger(), 3, ("acme", "s1"), events) == (events, 0)
    assert await gather(NoLedger(), 4, ("acme", "s1"), events) == (events[1:], 0)


def test_a_decoded_event_reads_like_the_kernels() -> None:
    record = EventRecordCodec.encode("acme", "s1", 3, "tool.result", {"x": 1}, T0)
    assert orjson.loads(record.value)["committedAt"] == DecodedEvent.of(record.value).committed_at
    assert repr(DecodedEvent.of(record.value)) == "DecodedEvent('acme', 's1', 3, 'tool.result')"
