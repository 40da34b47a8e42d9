"""`keel-stream verify`: the events topic and the read models against the ledger.

In order: the session heads and the newest outbox id are read in one snapshot (what must be
on the topic); the outbox is given up to the wait to publish what was in it then (what is still
there afterwards is pending, not missing); the topic is read from its log start up to each
partition's end as first seen; then the ledger is read in pages of sessions in key order, each
session compared with its records and each of its read models with the fold of its events. A
model behind the snapshot's head is waited for (what is left of the same wait) and then
reported behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from keel_stream.errors import SessionNotFound, TenantNotFound
from keel_stream.kafka.read_all import read_to_end
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel.commits import check_identifier
from keel_stream.projections import ALL
from keel_stream.projections.base import Projection
from keel_stream.store.verify_reads import Key, LedgerEvent, Scope, Snapshot, VerifyReads
from keel_stream.topics.catalog import EVENTS
from keel_stream.verify.models import compare_model, stored_seq
from keel_stream.verify.report import Check, Difference, Tally, VerifyReport
from keel_stream.verify.topic import TopicIndex, check_session

__all__ = ["Chunk", "VerifyOptions", "chunks", "verify"]

_ALL_PROJECTIONS: Final[tuple[Projection[Any], ...]] = ALL


@dataclass(frozen=True, slots=True)
class VerifyOptions:
    scope: Scope = field(default_factory=Scope)
    topic_prefix: str = ""
    wait_s: float = 30.0
    """The longest the whole verification waits for the outbox and the read models."""
    fail_on_duplicates: bool = False
    keep: int = 100
    """How many failures (and, apart, notes) the report lists; the counts are always whole."""
    page_events: int = 5_000
    """About how many ledger events one read fetches."""
    poll_s: float = 0.2


@dataclass(frozen=True, slots=True)
class Chunk:
    """Sessions read together: those with after < key <= upto (ranged), or each one alone."""

    after: Key
    upto: Key
    keys: tuple[Key, ...]
    ranged: bool


def chunks(heads: Mapping[Key, int], start: Key, page: int, *, ranged: bool) -> Iterator[Chunk]:
    """The snapshot's sessions in key order, grouped so a chunk holds about `page` events; a
    session larger than a page is a chunk of its own, read in pages of seqs."""
    after, total = start, 0
    current: list[Key] = []
    for key in sorted(heads):
        head = heads[key]
        if current and (not ranged or total + head > page or head > page):
            yield Chunk(after, current[-1], tuple(current), ranged and total <= page)
            after, current, total = current[-1], [], 0
        current.append(key)
        total += head
    if current:
        yield Chunk(after, current[-1], tuple(current), ranged and total <= page)


class _Verification:
    def __init__(self, reads: VerifyReads, options: VerifyOptions, deadline: float) -> None:
        self.reads = reads
        self.options = options
        self.deadline = deadline
        self.tally = Tally(
            projections=tuple(p.name for p in _ALL_PROJECTIONS),
            fail_on_duplicates=options.fail_on_duplicates,
            keep=options.keep,
        )
        self.index = TopicIndex(options.scope, self.tally)
        self.behind: list[tuple[Projection[Any], Key, int]] = []
        self.waited_s = 0.0

    async def _wait(self) -> bool:
        """Sleep one poll interval unless the deadline has passed; False once it has."""
        loop = asyncio.get_running_loop()
        if loop.time() >= self.deadline:
            return False
        pause = min(self.options.poll_s, self.deadline - loop.time())
        await asyncio.sleep(pause)
        self.waited_s += pause
        return True

    async def drain(self, mark: int) -> dict[Key, set[int]]:
        """The seqs (at or below the mark) still in the outbox once it drained or the wait ran
        out."""
        scope = self.options.scope
        while mark and await self.reads.pending_count(scope, mark):
            if not await self._wait():
                break
        return await self.reads.pending(scope, mark) if mark else {}

    async def read_chunk(self, chunk: Chunk) -> dict[Key, list[LedgerEvent]]:
        by_key: dict[Key, list[LedgerEvent]] = {key: [] for key in chunk.keys}
        if chunk.ranged:
            for event in await self.reads.events_between(chunk.after, chunk.upto):
                by_key.setdefault(event.key, []).append(event)
            return by_key
        page = self.options.page_events
        for key in chunk.keys:
            while True:
                after = by_key[key][-1].seq if by_key[key] else 0
                got = await self.reads.ledger_range(*key, after, after + page)
                by_key[key].extend(got)
                if len(got) < page:
                    break
        return by_key

    async def check_chunk(
        self, chunk: Chunk, snapshot: Snapshot, pending: dict[Key, set[int]]
    ) -> None:
        by_key = await self.read_chunk(chunk)
        for key in sorted(by_key):
            head = snapshot.heads.get(key, 0)
            if key in snapshot.heads:
                self.tally.sessions += 1
                self.tally.events += head
            entries = self.index.pop(key)
            check_session(key, by_key[key], head, pending.get(key, ()), entries, self.tally)
        # Sessions created since the snapshot had their records checked; their models wait
        # for the next verification.
        known = {key: events for key, events in by_key.items() if key in snapshot.heads}
        await self.check_models(known, snapshot.heads)

    async def check_models(
        self, by_key: dict[Key, list[LedgerEvent]], heads: Mapping[Key, int]
    ) -> None:
        states = await self.reads.live_states(sorted(by_key))
        for key, events in sorted(by_key.items()):
            for projection in _ALL_PROJECTIONS:
                stored = states.get((projection.name, key))
                have = events[-1].seq if events else 0
                if stored_seq(stored) > have:  # applied after the ledger page was read
                    events.extend(await self.reads.ledger_range(*key, have, stored_seq(stored)))
                self.tally.model_sessions[projection.name] += 1
                difference = compare_model(projection, key, stored, events)
                if difference is not None:
                    self.tally.note(difference)
                elif stored_seq(stored) < heads.get(key, 0):
                    self.behind.append((projection, key, heads[key]))

    async def leftovers(self) -> None:
        """Records of sessions the ledger pages did not cover (committed since the snapshot, or
        not in the ledger at all)."""
        for key in self.index.remaining():
            entries = self.index.pop(key)
            events = await self.reads.ledger_range(*key, 0, max(e.seq for e in entries))
            check_session(key, events, 0, (), entries, self.tally)

    async def catch_up(self) -> None:
        """Wait for the models behind the snapshot's heads; compare those that get there."""
        waiting = self.behind
        reached: dict[tuple[str, Key], int] = {}
        while waiting:
            states = await self.reads.live_states(sorted({key for _, key, _ in waiting}))
            still = []
            for projection, key, target in waiting:
                stored = states.get((projection.name, key))
                reached[(projection.name, key)] = stored_seq(stored)
                if stored_seq(stored) < target:
                    still.append((projection, key, target))
                    continue
                events = await self.reads.ledger_range(*key, 0, stored_seq(stored))
                difference = compare_model(projection, key, stored, events)
                if difference is not None:
                    self.tally.note(difference)
            waiting = still
            if waiting and not await self._wait():
                break
        for projection, key, target in waiting:
            at = reached[(projection.name, key)]
            detail = f"at seq {at}, the ledger head was {target} when the verification started"
            self.tally.note(Difference(Check.MODEL_BEHIND, *key, at, detail, projection.name))


async def _check_scope(reads: VerifyReads, scope: Scope) -> None:
    if scope.session is not None:
        check_identifier(scope.session, "session")
    if scope.tenant is not None:
        check_identifier(scope.tenant, "tenant")
        if not await reads.tenant_exists(scope.tenant):
            raise TenantNotFound(f"tenant {scope.tenant!r} does not exist")


async def verify(reads: VerifyReads, kafka: KafkaSettings, options: VerifyOptions) -> VerifyReport:
    """Verify the scope's sessions; the report says what differs (nothing is ever changed)."""
    scope = options.scope
    await _check_scope(reads, scope)
    deadline = asyncio.get_running_loop().time() + options.wait_s
    run = _Verification(reads, options, deadline)
    snapshot = await reads.snapshot(scope)
    if scope.session is not None and not snapshot.heads:
        raise SessionNotFound(f"no session {scope.session!r}" + _in_tenant(scope))
    pending = await run.drain(snapshot.outbox_mark)
    topic = EVENTS.full_name(options.topic_prefix)
    await read_to_end(kafka, topic, run.index.add)
    start = (scope.tenant or "", "")
    for chunk in chunks(snapshot.heads, start, options.page_events, ranged=scope.session is None):
        await run.check_chunk(chunk, snapshot, pending)
    await run.leftovers()
    await run.catch_up()
    return run.tally.report(topic, run.waited_s)


def _in_tenant(scope: Scope) -> str:
    return "" if scope.tenant is None else f" in tenant {scope.tenant!r}"
