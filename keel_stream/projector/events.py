"""The event as the projector handles it: decoded once, from a record or a ledger row."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

__all__ = ["LedgerEvent", "SourceRecord"]


@dataclass(frozen=True, slots=True)
class LedgerEvent:
    tenant: str
    session: str
    seq: int
    kind: str
    payload: dict[str, Any]
    committed_at: str

    @classmethod
    def from_record(cls, value: bytes) -> LedgerEvent:
        d = orjson.loads(value)
        return cls(d["tenant"], d["session"], d["seq"], d["kind"], d["payload"], d["committedAt"])

    @classmethod
    def from_row(cls, tenant: str, session: str, row: Mapping[str, Any]) -> LedgerEvent:
        """From a ledger row (seq, kind, payload, committed_at)."""
        committed: datetime = row["committed_at"]
        return cls(
            tenant,
            session,
            row["seq"],
            row["kind"],
            row["payload"],
            committed.isoformat().replace("+00:00", "Z"),
        )

    @property
    def key(self) -> tuple[str, str]:
        return (self.tenant, self.session)


@dataclass(frozen=True, slots=True)
class SourceRecord:
    """An event and where it came from on the source topic."""

    event: LedgerEvent
    partition: int
    offset: int
