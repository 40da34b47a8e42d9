"""The size limits agree: the kernel refuses an event over MAX_EVENT_BYTES, and the largest event
it accepts fits, with the largest envelope, in a record of the events topic and, as its SSE
frame, in a record of the SSE topic (both the catalog's max.message.bytes)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from keel_stream.errors import PayloadTooLarge
from keel_stream.kafka.records import EventRecordCodec, record_key
from keel_stream.kernel import CommitRequest, prepare
from keel_stream.kernel.limits import MAX_EVENT_BYTES, event_size
from keel_stream.kernel.vocabulary import REGISTRY
from keel_stream.projections.sse import render_frame
from keel_stream.topics.catalog import CATALOG, EVENTS, SSE

LONGEST_ID = "a" * 128
LONGEST_KIND = max((str(kind) for kind in REGISTRY), key=len)
LARGEST_SEQ = 2**63 - 1
STAMP = datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def payload_of(size: int, **fields: Any) -> dict[str, Any]:
    """A payload whose JSON is exactly `size` bytes."""
    payload: dict[str, Any] = {**fields, "text": ""}
    payload["text"] = "x" * (size - event_size(payload))
    assert event_size(payload) == size
    return payload


def request(payload: dict[str, Any]) -> CommitRequest:
    return CommitRequest(
        tenant_id="acme", session_id="s1", kind="user.message", payload=payload, key="r1"
    )


def test_an_event_at_the_limit_is_accepted_and_one_byte_more_is_refused() -> None:
    # The request key becomes payload.requestId: the limit holds for the payload as stored.
    at_limit = payload_of(MAX_EVENT_BYTES, requestId="r1")
    assert event_size(prepare(request(at_limit)).payload) == MAX_EVENT_BYTES
    with pytest.raises(PayloadTooLarge) as refused:
        prepare(request(payload_of(MAX_EVENT_BYTES + 1, requestId="r1")))
    assert refused.value.code == "payload_too_large"
    assert str(MAX_EVENT_BYTES) in str(refused.value)


def test_the_size_is_the_json_as_stored_not_the_canonical_form() -> None:
    # 1.0 is stored and published as 1.0 (the canonical form, 1, is only compared by).
    payload = {"numbers": [1.0] * 10}
    assert event_size(payload) == len(orjson.dumps(payload)) == len(b'{"numbers":[]}') + 39


def _record_size(key: bytes, value: bytes, headers: list[tuple[str, bytes]]) -> int:
    """What the producer checks against max_request_size, and the broker against
    max.message.bytes: the record in a batch of its own."""
    size: int = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, headers)
    return size


def test_the_largest_event_fits_in_an_events_record() -> None:
    payload = payload_of(MAX_EVENT_BYTES)
    record = EventRecordCodec.encode(
        LONGEST_ID, LONGEST_ID, LARGEST_SEQ, LONGEST_KIND, payload, STAMP
    )
    size = _record_size(record.key, record.value, record.headers)
    assert size <= EVENTS.max_message_bytes
    assert size - MAX_EVENT_BYTES < 2048, "the envelope stays small"


def test_the_largest_event_fits_in_its_sse_frame() -> None:
    event = EventRecordCodec.decode(
        EventRecordCodec.encode(
            LONGEST_ID, LONGEST_ID, LARGEST_SEQ, LONGEST_KIND, payload_of(MAX_EVENT_BYTES), STAMP
        ).value
    )
    frame = render_frame(event, event.committed_at).model_dump_json().encode()
    headers = [("seq", str(LARGEST_SEQ).encode()), ("kind", LONGEST_KIND.encode())]
    size = _record_size(record_key(LONGEST_ID, LONGEST_ID), frame, headers)
    assert size <= SSE.max_message_bytes


def test_every_topic_is_created_with_the_record_limit() -> None:
    for spec in CATALOG:
        assert spec.configs()["max.message.bytes"] == str(spec.max_message_bytes)
        assert spec.max_message_bytes >= 2 * MAX_EVENT_BYTES
