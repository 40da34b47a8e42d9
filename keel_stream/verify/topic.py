"""The events topic against the ledger, session by session (pure: no I/O).

Every record of a session is kept in partition and offset order as a fingerprint (kind, a digest
of the payload, commit time), so a large topic costs tens of bytes per record, not its payloads.
The de-duplication is the one docs/topics.md gives consumers: a (tenant, session, seq) seen
before is a duplicate.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Protocol

import orjson

from keel_stream.kafka.read_all import RawRecord
from keel_stream.kafka.records import CLAIM_CHECK_FIELD, is_claim_check, record_key
from keel_stream.kernel.types import EventLike
from keel_stream.store.verify_reads import Key, Scope
from keel_stream.verify.report import Check, Difference, Tally

__all__ = ["Committed", "Entry", "Fingerprint", "TopicIndex", "check_session", "fingerprint"]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)


class Committed(EventLike, Protocol):
    """A ledger event as compared: a fold's fields and the commit time (an `Event`, or the
    store's lighter `LedgerEvent`)."""

    @property
    def committed_at(self) -> datetime: ...


@dataclass(frozen=True, slots=True)
class Fingerprint:
    kind: str
    payload: bytes
    committed_us: int

    def differences(self, ledger: Fingerprint, *, payload: bool = True) -> list[str]:
        """What differs from the ledger's fingerprint, as words for a report (the payload
        left out when it is a claim check's)."""
        found = []
        if self.kind != ledger.kind:
            found.append(f"kind {self.kind!r} (ledger: {ledger.kind!r})")
        if payload and self.payload != ledger.payload:
            found.append("payload differs")
        if self.committed_us != ledger.committed_us:
            found.append(
                f"committedAt {_stamp(self.committed_us)} (ledger: {_stamp(ledger.committed_us)})"
            )
        return found


def _stamp(micros: int) -> str:
    return (_EPOCH + micros * _MICROSECOND).isoformat().replace("+00:00", "Z")


def fingerprint(kind: str, payload: Any, committed_at: datetime) -> Fingerprint:
    canonical = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    return Fingerprint(
        kind=kind,
        payload=hashlib.blake2b(canonical, digest_size=16).digest(),
        committed_us=(committed_at - _EPOCH) // _MICROSECOND,
    )


def event_fingerprint(event: Committed) -> Fingerprint:
    return fingerprint(event.kind, event.payload, event.committed_at)


@dataclass(frozen=True, slots=True)
class Entry:
    """One record of a session on the topic."""

    partition: int
    offset: int
    seq: int
    print: Fingerprint
    key_matches: bool
    claim_check: str | None = None
    """The reason, for a claim check (a stand-in whose payload is in the ledger only)."""


class TopicIndex:
    """The topic's records of the verified scope, by session; records that are not events
    become differences at once."""

    def __init__(self, scope: Scope, tally: Tally) -> None:
        self._scope = scope
        self._tally = tally
        self._sessions: dict[Key, list[Entry]] = {}

    def add(self, batch: Sequence[RawRecord]) -> None:
        for record in batch:
            if not self._key_in_scope(record.key):
                continue
            try:
                tenant, session, entry = _decode(record)
            except (ValueError, KeyError, TypeError) as exc:
                self._tally.records += 1
                self._undecodable(record, exc)
                continue
            if not self._scope.admits(tenant, session):
                continue
            self._tally.records += 1
            self._sessions.setdefault((tenant, session), []).append(entry)

    def _key_in_scope(self, key: bytes | None) -> bool:
        if key is None or (self._scope.tenant is None and self._scope.session is None):
            return True
        tenant, _, session = key.decode(errors="replace").partition("/")
        return self._scope.admits(tenant, session)

    def _undecodable(self, record: RawRecord, exc: Exception) -> None:
        key = (record.key or b"?/?").decode(errors="replace")
        tenant, _, session = key.partition("/")
        where = f"partition {record.partition} offset {record.offset}"
        self._tally.note(
            Difference(Check.EXTRA, tenant, session or "?", None, f"{where}: not an event ({exc})")
        )

    def pop(self, key: Key) -> list[Entry]:
        return self._sessions.pop(key, [])

    def remaining(self) -> list[Key]:
        return sorted(self._sessions)


def _decode(record: RawRecord) -> tuple[str, str, Entry]:
    if record.value is None:
        raise ValueError("no value")
    value = orjson.loads(record.value)
    tenant, session, seq = value["tenant"], value["session"], value["seq"]
    if not isinstance(tenant, str) or not isinstance(session, str) or not isinstance(seq, int):
        raise TypeError("tenant, session and seq must be strings and an integer")
    stamp = datetime.fromisoformat(value["committedAt"])
    payload = value["payload"]
    entry = Entry(
        partition=record.partition,
        offset=record.offset,
        seq=seq,
        print=fingerprint(str(value["kind"]), payload, stamp),
        key_matches=record.key == record_key(tenant, session),
        claim_check=_claim_check_reason(payload),
    )
    return tenant, session, entry


def _claim_check_reason(payload: Any) -> str | None:
    if not isinstance(payload, dict) or not is_claim_check(payload):
        return None
    return str(payload[CLAIM_CHECK_FIELD].get("reason", "refused"))


def check_session(
    key: Key,
    events: Sequence[Committed],
    head: int,
    pending: Iterable[int],
    entries: Sequence[Entry],
    tally: Tally,
) -> None:
    """Compare one session's records with its ledger events.

    `events` are the session's ledger events in seq order (read after the topic, so every
    record of a ledger event finds it); `head` is its last seq when the verification started,
    the events up to it must be on the topic unless `pending` (still in the outbox)."""
    ledger = {e.seq: event_fingerprint(e) for e in events}
    seen = _walk(key, ledger, entries, tally)
    waiting = sorted(s for s in set(pending) if s not in seen and s <= head)
    unpublished = set(waiting)
    for seq in range(1, head + 1):
        if seq not in seen and seq not in unpublished:
            tally.note(Difference(Check.MISSING, *key, seq, "committed, not on the topic"))
    if waiting:
        detail = f"{len(waiting)} events still in the outbox (seqs {waiting[0]}..{waiting[-1]})"
        tally.note(Difference(Check.PENDING, *key, waiting[0], detail), weight=len(waiting))


def _walk(
    key: Key, ledger: dict[int, Fingerprint], entries: Sequence[Entry], tally: Tally
) -> set[int]:
    """Check each record in partition order; the seqs seen."""
    seen: dict[int, Entry] = {}
    last = 0
    for entry in sorted(entries, key=lambda e: (e.partition, e.offset)):
        where = f"partition {entry.partition} offset {entry.offset}"
        first = seen.get(entry.seq)
        if first is not None:
            detail = f"{where} repeats offset {first.offset}"
            tally.note(Difference(Check.DUPLICATE, *key, entry.seq, detail))
        elif entry.seq < last:
            detail = f"{where} comes after seq {last}"
            tally.note(Difference(Check.OUT_OF_ORDER, *key, entry.seq, detail))
        seen.setdefault(entry.seq, entry)
        last = max(last, entry.seq)
        _compare(key, ledger.get(entry.seq), entry, where, tally)
    partitions = sorted({e.partition for e in entries})
    if len(partitions) > 1:
        detail = f"the session's records are in partitions {partitions}"
        tally.note(Difference(Check.OUT_OF_ORDER, *key, None, detail))
    return set(seen)


def _compare(key: Key, ledger: Fingerprint | None, entry: Entry, where: str, tally: Tally) -> None:
    if ledger is None:
        tally.note(Difference(Check.EXTRA, *key, entry.seq, f"{where}: not in the ledger"))
        return
    if entry.claim_check is not None:
        detail = f"{where}: a claim check ({entry.claim_check}), the payload is in the ledger"
        tally.note(Difference(Check.CLAIM_CHECK, *key, entry.seq, detail))
    found = entry.print.differences(ledger, payload=entry.claim_check is None)
    if not entry.key_matches:
        found.append(f"the record key is not {record_key(*key).decode()!r}")
    if found:
        tally.note(Difference(Check.DIFFERS, *key, entry.seq, f"{where}: {', '.join(found)}"))
