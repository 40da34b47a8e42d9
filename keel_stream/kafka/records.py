"""How a ledger event travels on keel.events.v1: key, headers, value."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from keel_stream.kernel.types import Event

__all__ = ["EventRecordCodec", "OutgoingRecord", "record_key"]


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
    ) -> OutgoingRecord:
        value = {
            "tenant": tenant,
            "session": session,
            "seq": seq,
            "kind": kind,
            "payload": payload,
            "committedAt": committed_at,
        }
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
    def decode(value: bytes) -> Event:
        return Event.model_validate_json(value)
