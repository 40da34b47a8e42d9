"""What a verification found: a count per check, and the differences behind the counts."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Check", "Difference", "Row", "Tally", "VerifyReport"]


class Check(StrEnum):
    """What a difference is. Duplicates and pending events are notes unless the caller says
    duplicates fail; every other check is a failure."""

    MISSING = "missing"
    """A ledger event (committed when the verification started) that is not on the topic."""
    EXTRA = "extra"
    """A record on the topic that is not a ledger event (or not an event at all)."""
    OUT_OF_ORDER = "out_of_order"
    """A seq first seen after a higher seq of its session, or a session in two partitions."""
    DIFFERS = "differs"
    """A record whose kind, payload, commit time or key differs from its ledger event."""
    DUPLICATE = "duplicate"
    """A record whose (tenant, session, seq) came earlier: what consumers de-duplicate."""
    PENDING = "pending"
    """Events still in the outbox: committed, not yet published; not looked for on the topic."""
    CLAIM_CHECK = "claim_check"
    """A record that stands in for an event too large (or refused): its payload is not compared."""
    MODEL_DIFFERS = "model_differs"
    """A stored read model that differs from the fold of the ledger up to its seq."""
    MODEL_BEHIND = "model_behind"
    """A stored read model that had not reached the ledger head when the wait ended."""


_TOPIC_CHECKS = (Check.MISSING, Check.EXTRA, Check.OUT_OF_ORDER, Check.DIFFERS)
_LABELS = {
    Check.MISSING: "missing from the topic",
    Check.EXTRA: "not in the ledger",
    Check.OUT_OF_ORDER: "out of order",
    Check.DIFFERS: "differs from the ledger",
}


@dataclass(frozen=True, slots=True)
class Difference:
    check: Check
    tenant: str
    session: str
    seq: int | None
    detail: str
    projection: str | None = None

    def line(self) -> str:
        where = f"tenant={self.tenant} session={self.session}"
        if self.seq is not None:
            where += f" seq={self.seq}"
        if self.projection is not None:
            where += f" projection={self.projection}"
        return f"{self.check.value:<14} {where}: {self.detail}"

    def as_json(self) -> dict[str, Any]:
        return {
            "check": self.check.value,
            "tenant": self.tenant,
            "session": self.session,
            "seq": self.seq,
            "projection": self.projection,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the summary: what was checked, how many, and the verdict."""

    check: str
    count: int
    result: str
    """'ok', 'FAIL', 'allowed' (duplicates that do not fail), or '' for a plain count."""


@dataclass
class Tally:
    """Counts and the first `keep` failures and notes, filled in while the checks run."""

    projections: tuple[str, ...]
    fail_on_duplicates: bool = False
    keep: int = 100
    sessions: int = 0
    events: int = 0
    records: int = 0
    counts: Counter[tuple[Check, str | None]] = field(default_factory=Counter)
    model_sessions: Counter[str] = field(default_factory=Counter)
    failures: list[Difference] = field(default_factory=list)
    notes: list[Difference] = field(default_factory=list)

    def fails(self, check: Check) -> bool:
        if check in (Check.PENDING, Check.CLAIM_CHECK):
            return False
        return check is not Check.DUPLICATE or self.fail_on_duplicates

    def note(self, difference: Difference, weight: int = 1) -> None:
        self.counts[(difference.check, difference.projection)] += weight
        listed = self.failures if self.fails(difference.check) else self.notes
        if len(listed) < self.keep:
            listed.append(difference)

    def count(self, check: Check, projection: str | None = None) -> int:
        return self.counts[(check, projection)]

    def report(self, topic: str, waited_s: float) -> VerifyReport:
        failed = sum(n for (check, _), n in self.counts.items() if self.fails(check))
        return VerifyReport(
            topic=topic,
            ok=failed == 0,
            failed=failed,
            duplicates_fail=self.fail_on_duplicates,
            rows=tuple(self._rows()),
            counts=self._counts(),
            models={
                name: {
                    "sessions": self.model_sessions[name],
                    "differs": self.count(Check.MODEL_DIFFERS, name),
                    "behind": self.count(Check.MODEL_BEHIND, name),
                }
                for name in self.projections
            },
            failures=tuple(self.failures),
            notes=tuple(self.notes),
            waited_s=waited_s,
        )

    def _counts(self) -> dict[str, int]:
        return {
            "sessions": self.sessions,
            "events": self.events,
            "records": self.records,
            "pending": self.count(Check.PENDING),
            "missing": self.count(Check.MISSING),
            "extra": self.count(Check.EXTRA),
            "outOfOrder": self.count(Check.OUT_OF_ORDER),
            "differs": self.count(Check.DIFFERS),
            "duplicates": self.count(Check.DUPLICATE),
            "claimChecks": self.count(Check.CLAIM_CHECK),
        }

    def _verdict(self, check: Check, count: int) -> str:
        if not count:
            return "ok"
        return "FAIL" if self.fails(check) else "allowed"

    def _rows(self) -> Iterable[Row]:
        yield Row("sessions", self.sessions, "")
        yield Row("ledger events", self.events, "")
        yield Row("topic records", self.records, "")
        yield Row("pending in the outbox", self.count(Check.PENDING), "")
        for check in _TOPIC_CHECKS:
            yield Row(_LABELS[check], self.count(check), self._verdict(check, self.count(check)))
        duplicates = self.count(Check.DUPLICATE)
        yield Row("duplicates", duplicates, self._verdict(Check.DUPLICATE, duplicates))
        yield Row("claim checks", self.count(Check.CLAIM_CHECK), "")
        for name in self.projections:
            yield Row(f"read model {name} sessions", self.model_sessions[name], "")
            for check, label in ((Check.MODEL_DIFFERS, "differs"), (Check.MODEL_BEHIND, "behind")):
                count = self.count(check, name)
                yield Row(f"read model {name} {label}", count, self._verdict(check, count))


@dataclass(frozen=True, slots=True)
class VerifyReport:
    topic: str
    ok: bool
    failed: int
    """How many differences fail the verification (listed or not)."""
    duplicates_fail: bool
    rows: tuple[Row, ...]
    """The summary table."""
    counts: dict[str, int]
    """Sessions, events, records and each topic check's count, by name (the JSON form)."""
    models: dict[str, dict[str, int]]
    """Per projection: sessions compared, models that differ, models behind."""
    failures: tuple[Difference, ...]
    """The first failing differences (up to the tally's `keep`)."""
    notes: tuple[Difference, ...]
    """The first duplicates, claim checks and pending sessions, which do not fail it."""
    waited_s: float

    @property
    def unlisted(self) -> int:
        return self.failed - len(self.failures)

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "topic": self.topic,
            "failed": self.failed,
            "waitedS": round(self.waited_s, 3),
            "duplicatesFail": self.duplicates_fail,
            "counts": self.counts,
            "readModels": self.models,
            "failures": [d.as_json() for d in self.failures],
            "unlistedFailures": self.unlisted,
            "notes": [d.as_json() for d in self.notes],
        }
