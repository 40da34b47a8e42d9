"""How a ledger event travels on keel.events.v1: key, headers, value.

An event the broker cannot take (larger than the topic's `max.message.bytes`, or refused as
invalid) travels as a claim check instead: the same key, headers and envelope (tenant, session,
seq, kind, committedAt), a `claim-check` header naming the reason, and as its payload only
`{"keel.claimCheck": {...}}`. It keeps the event's place on the topic, so a consumer sees every
seq in order and fetches the payload from the ledger by seq.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import orjson

from keel_stream.kernel.types import Event

__all__ = [
    "CLAIM_CHECK_FIELD",
    "CLAIM_CHECK_HEADER",
    "EventRecordCodec",
    "OutgoingRecord",
    "is_claim_check",
    "record_key",
]

CLAIM_CHECK_FIELD: Final = "keel.claimCheck"
"""The one key of a claim check's payload."""
CLAIM_CHECK_HEADER: Final = "claim-check"
"""The header of a claim check; its value is the reason (too_large, refused, unencodable)."""


def record_key(tenant: str, session: str) -> bytes:
    """The partitioning key: every event of a session lands in one partition, in order."""
    return f"{tenant}/{session}".encode()


@dataclass(frozen=True, slots=True)
class OutgoingRecord:
    """A record ready for the producer."""

    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]


class EventRecordCodec:
    """Encodes ledger rows as records and decodes record values as Events."""

    @staticmethod
    def encode(
        tenant: str,
        session: str,
        seq: int,
        kind: str,
        payload: dict[str, Any],
        committed_at: datetime,
        metadata: dict[str, Any] | None = None,
    ) -> OutgoingRecord:
        value: dict[str, Any] = {
            "tenant": tenant,
            "session": session,
            "seq": seq,
            "kind": kind,
            "payload": payload,
            "committedAt": committed_at,
        }
        if metadata is not None:  # most events have none: their records stay as they were
            value["metadata"] = metadata
        return OutgoingRecord(
            key=record_key(tenant, session),
            value=orjson.dumps(value, option=orjson.OPT_UTC_Z),
            headers=[
                ("tenant", tenant.encode()),
                ("session", session.encode()),
                ("seq", str(seq).encode()),
                ("kind", kind.encode()),
            ],
        )

    @staticmethod
    def claim_check(
        tenant: str,
        session: str,
        seq: int,
        kind: str,
        committed_at: datetime,
        details: Mapping[str, Any],
    ) -> OutgoingRecord:
        """The stand-in for an event the broker cannot take; `details` says why (its `reason`
        goes into the header too)."""
        record = EventRecordCodec.encode(
            tenant, session, seq, kind, {CLAIM_CHECK_FIELD: dict(details)}, committed_at
        )
        reason = str(details.get("reason", "refused"))
        return OutgoingRecord(
            record.key, record.value, [*record.headers, (CLAIM_CHECK_HEADER, reason.encode())]
        )

    @staticmethod
    def decode(value: bytes) -> Event:
        return Event.model_validate_json(value)


def is_claim_check(payload: Mapping[str, Any]) -> bool:
    """True for the payload of a claim check read off keel.events.v1 (never for a ledger row:
    only a record's payload is a stand-in)."""
    return len(payload) == 1 and isinstance(payload.get(CLAIM_CHECK_FIELD), dict)
