"""Records the broker refuses for what they are: published as claim checks, never retried forever.

A refusal is about one record when the same record would be refused however often it is sent:
larger than the topic or the producer takes (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE), refused
as invalid (CORRUPT_MESSAGE; INVALID_RECORD, which the client reports as UnknownError), or not
encodable at all. Everything else (the broker away, a timeout, a lost producer session) is
transient, or concerns every record alike (an ACL, a missing topic), and goes on being handled
by keel_stream.relay.retry.

A refused batch does not say which of its records was refused (a produce request fails a whole
partition batch), so the relay first sends the first unacknowledged row alone. Refused alone,
that row's claim check (keel_stream.kafka.records) is sent in its place: the same key, so the
same partition, and the later rows of its session are fetched only once it is acknowledged, so
every seq of a session stays on the topic in order. A claim check the broker refuses too means
the topic cannot take even about a KiB: that is raised, as before.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from keel_stream.kafka.errors import client_failure, record_refusal
from keel_stream.kernel.limits import event_size
from keel_stream.store.outbox import OutboxRow

__all__ = ["Refusals", "refusal"]


def refusal(exc: BaseException) -> str | None:
    """Why the broker (or the producer, or the encoder) refused one record: too_large, refused
    or unencodable; None when the failure is not about the record."""
    reason = record_refusal(exc)
    if reason is not None:
        return reason
    if isinstance(exc, TypeError | ValueError) and not client_failure(exc):
        return "unencodable"  # orjson.JSONEncodeError is a TypeError
    return None


@dataclass(slots=True)
class Refusals:
    """What the relay does next about a refused record: send it alone, or its claim check."""

    alone: int | None = None
    """The outbox id of a row whose batch was refused: it is sent on its own next."""
    stand_in: int | None = None
    """The outbox id of a row refused on its own: its claim check is sent next."""
    details: dict[str, Any] = field(default_factory=dict)
    """What the claim check says about the refusal."""

    @property
    def sorting_out(self) -> bool:
        """Whether a refused row is being sorted out (sent alone, or as its claim check)."""
        return self.alone is not None or self.stand_in is not None

    def batch_size(self, usual: int) -> int:
        """Rows to fetch: one while a refused row is being sorted out."""
        return 1 if self.sorting_out else usual

    def claim_check_for(self, rows: list[OutboxRow]) -> dict[str, Any] | None:
        """The claim check's details when the fetched rows are the refused row alone."""
        if self.stand_in is not None and len(rows) == 1 and rows[0].id == self.stand_in:
            return self.details
        return None

    def fetched(self, first_id: int) -> None:
        """The outbox's first row now: a refused row before it is gone (published by another
        relay, or found on the topic already), and nothing is to be done about it any more."""
        if self.alone is not None and self.alone < first_id:
            self.alone = None
        if self.stand_in is not None and self.stand_in < first_id:
            self.stand_in = None

    def published(self, rows: list[OutboxRow]) -> None:
        """Rows acknowledged (as themselves or as their claim checks)."""
        ids = {r.id for r in rows}
        if self.alone in ids:
            self.alone = None
        if self.stand_in in ids:
            self.stand_in = None

    def refused(
        self, rows: list[OutboxRow], acked: int, exc: BaseException, *, claim_check: bool
    ) -> bool:
        """A publish of `rows` (or of a claim check) stopped at rows[acked] with exc: True when
        that is a refusal of the record, and the next publish sends it alone or as its claim
        check; False when exc is to be handled as any other failure (a refused claim check
        included)."""
        reason = refusal(exc)
        if reason is None or claim_check:
            return False
        row = rows[acked]
        if len(rows) > 1:
            self.alone = row.id
            return True
        self.alone = None
        self.stand_in = row.id
        self.details = {"reason": reason, "error": type(exc).__name__}
        with contextlib.suppress(TypeError, ValueError):
            self.details["payloadBytes"] = event_size(row.payload)
        return True
