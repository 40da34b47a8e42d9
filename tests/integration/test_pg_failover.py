"""PostgreSQL failover (pg_auto_failover, synchronous standby): the primary is SIGKILLed under
steady commits; every acknowledged commit is in the ledger afterwards, once, with its outbox
row; the LISTEN connection listens again and the relay, reconnected to the new primary, leaves
every ledger event on the topic exactly once, in order per session."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg

from keel_stream.dev.pg_failover import FailoverFormation
from keel_stream.errors import KeelError
from keel_stream.kafka.admin import high_water_marks
from keel_stream.kernel import CommitRequest
from keel_stream.store import PostgresLedger, create_pool
from keel_stream.store.notifications import PostgresListener
from keel_stream.store.outbox import COMMITS_CHANNEL
from keel_stream.topics.catalog import EVENTS
from tests.support.kafka import KafkaServer, collect
from tests.support.ledger import make_sessions, outbox_empty
from tests.support.pg_failover import failover_formation
from tests.support.relays import RelayFleet
from tests.support.wait import wait_until

RELAY_ENV = {"KEEL_RELAY_POLL_INTERVAL_S": "0.1", "KEEL_RELAY_BATCH_SIZE": "200"}


@dataclass
class Writes:
    """What the writers saw: acknowledged (key, seq), ack times, retries after lost acks."""

    acked: dict[str, int] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    retried: int = 0
    replayed: int = 0
    """Retries that found their commit already made: the lost acknowledgement's case."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)


async def _commit_until_acked(ledger: PostgresLedger, request: CommitRequest, w: Writes) -> None:
    """A commit whose acknowledgement was lost is sent again with the same requestId."""
    attempts = 0
    while True:
        attempts += 1
        try:
            submission = await ledger.commit(request)
        except KeelError as exc:
            if not exc.retriable:
                raise AssertionError(f"a failover error must be retriable: {exc!r}") from exc
            w.retried += 1
            await asyncio.sleep(0.1)
            continue
        assert request.key is not None
        if attempts > 1 and not submission.created:
            w.replayed += 1
        w.acked[request.key] = submission.seq
        w.ack_times.append(time.monotonic())
        return


async def _writer(ledger: PostgresLedger, session: str, w: Writes) -> None:
    n = 0
    while not w.stop.is_set():
        request = CommitRequest(
            tenant_id="acme",
            session_id=session,
            kind="user.message",
            payload={"text": f"{session} {n}"},
            key=f"{session}-{n}",
        )
        await _commit_until_acked(ledger, request, w)
        n += 1


def _write_gap(ack_times: list[float]) -> float:
    """The longest time without an acknowledged commit (the failover's, under steady load)."""
    times = sorted(ack_times)
    return max(b - a for a, b in itertools.pairwise(times))


async def test_every_acknowledged_commit_survives_a_primary_failover(
    kafka: KafkaServer, topic_prefix: str
) -> None:
    async with failover_formation() as formation:
        sync = await _synchronous_standby_names(formation.dsn)
        assert sync, "the primary must replicate synchronously"
        pool = await create_pool(formation.dsn, max_size=4)
        try:
            ledger = PostgresLedger(pool)
            sessions = await make_sessions(ledger, 2)
            async with RelayFleet(
                formation.dsn, kafka.bootstrap, topic_prefix, **RELAY_ENV
            ) as fleet:
                await fleet.start()
                w = await _fail_over_under_commits(formation, pool, ledger, sessions)
                await wait_until(lambda: outbox_empty(pool), 60, "the relay to drain the outbox")
                await fleet.kill_all()
            await _assert_ledger_holds(pool, w.acked)
            await _assert_topic_holds_the_ledger(pool, kafka, topic_prefix)
        finally:
            await pool.close()


async def _fail_over_under_commits(
    formation: FailoverFormation, pool: asyncpg.Pool, ledger: PostgresLedger, sessions: list[str]
) -> Writes:
    """Steady commits; the primary SIGKILLed; commits and a NOTIFY again on the new primary."""
    notified: list[str] = []
    listener = PostgresListener(pool, COMMITS_CHANNEL, notified.append)
    await listener.start()
    w = Writes()
    writers = [asyncio.create_task(_writer(ledger, s, w)) for s in sessions]
    try:
        await wait_until(_acked_at_least(w, 20), 30, "commits before the kill")
        old = await formation.kill_primary()
        new = await formation.wait_promoted(old)
        await wait_until(_acked_at_least(w, len(w.acked) + 20), 60, "commits after failover")
        notified.clear()
        await wait_until(_was_notified(notified), 30, "a NOTIFY on the new primary")
    finally:
        w.stop.set()
        await asyncio.gather(*writers)
        await listener.stop()
    print(
        f"\npg failover: write gap {_write_gap(w.ack_times):.2f} s, {len(w.acked)} acknowledged"
        f" commits, {w.retried} retries ({w.replayed} found their commit made),"
        f" {old.name} -> {new.name}"
    )
    return w


async def _assert_topic_holds_the_ledger(
    pool: asyncpg.Pool, kafka: KafkaServer, topic_prefix: str
) -> None:
    """Every ledger event on the topic once, in seq order per session."""
    heads = {
        str(r["session_id"]): int(r["last_seq"])
        for r in await pool.fetch("SELECT session_id, last_seq FROM sessions")
    }
    total = sum(heads.values())
    topic = EVENTS.full_name(topic_prefix)
    received = await collect(kafka.bootstrap, topic, lambda got: len(got) >= total, 60)
    arrivals: dict[str, list[int]] = defaultdict(list)
    for record in received:
        arrivals[record.event.session].append(record.event.seq)
    assert sum((await high_water_marks(kafka.settings, topic)).values()) == total, "no duplicate"
    for session, last in heads.items():
        assert arrivals[session] == list(range(1, last + 1)), session


async def _synchronous_standby_names(dsn: str) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        return str(await conn.fetchval("SHOW synchronous_standby_names"))
    finally:
        await conn.close()


def _acked_at_least(w: Writes, count: int) -> Callable[[], Awaitable[bool]]:
    async def enough() -> bool:
        return len(w.acked) >= count

    return enough


def _was_notified(notified: list[str]) -> Callable[[], Awaitable[bool]]:
    async def seen() -> bool:
        return bool(notified)

    return seen


async def _assert_ledger_holds(pool: asyncpg.Pool, acked: dict[str, int]) -> None:
    """Every acknowledged commit at its seq, no key twice (its outbox row is checked on the
    topic: the relay deleted it once published)."""
    rows = await pool.fetch("SELECT dedupe_key, seq FROM events WHERE kind = 'user.message'")
    keys = [str(r["dedupe_key"]).partition(":")[2] for r in rows]  # "<key field>:<key>"
    stored = dict(zip(keys, (int(r["seq"]) for r in rows), strict=True))
    twice = [k for k, n in Counter(keys).items() if n > 1]
    assert not twice, f"{len(twice)} duplicated commits, e.g. {twice[:5]}"
    lost = sorted(k for k, seq in acked.items() if stored.get(k) != seq)
    assert not lost, f"{len(lost)} acknowledged commits missing after failover, e.g. {lost[:5]}"
