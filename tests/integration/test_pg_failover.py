"""PostgreSQL failover (pg_auto_failover, synchronous standby): the primary is SIGKILLed under
steady commits; every acknowledged commit is in the ledger afterwards, once, with its outbox
row, and the LISTEN connection listens again on the new primary."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import asyncpg

from keel_stream.errors import KeelError
from keel_stream.kernel import CommitRequest
from keel_stream.store import PostgresLedger, create_pool
from keel_stream.store.notifications import PostgresListener
from keel_stream.store.outbox import COMMITS_CHANNEL
from tests.support.ledger import make_sessions
from tests.support.pg_failover import failover_formation
from tests.support.wait import wait_until


@dataclass
class Writes:
    """What the writers saw: acknowledged (key, seq), ack times, retries after lost acks."""

    acked: dict[str, int] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    retried: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)


async def _commit_until_acked(ledger: PostgresLedger, request: CommitRequest, w: Writes) -> None:
    """A commit whose acknowledgement was lost is sent again with the same requestId."""
    while True:
        try:
            submission = await ledger.commit(request)
        except KeelError as exc:
            if not exc.retriable:
                raise AssertionError(f"a failover error must be retriable: {exc!r}") from exc
            w.retried += 1
            await asyncio.sleep(0.1)
            continue
        assert request.key is not None
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


async def test_every_acknowledged_commit_survives_a_primary_failover() -> None:
    async with failover_formation() as formation:
        sync = await _synchronous_standby_names(formation.dsn)
        assert sync, "the primary must replicate synchronously"
        pool = await create_pool(formation.dsn, max_size=4)
        notified: list[str] = []
        listener = PostgresListener(pool, COMMITS_CHANNEL, notified.append)
        try:
            ledger = PostgresLedger(pool)
            sessions = await make_sessions(ledger, 2)
            await listener.start()
            w = Writes()
            writers = [asyncio.create_task(_writer(ledger, s, w)) for s in sessions]
            await wait_until(_acked_at_least(w, 20), 30, "commits before the kill")
            old = await formation.kill_primary()
            new = await formation.wait_promoted(old)
            await wait_until(_acked_at_least(w, len(w.acked) + 20), 60, "commits after failover")
            notified.clear()
            await wait_until(_was_notified(notified), 30, "a NOTIFY on the new primary")
            w.stop.set()
            await asyncio.gather(*writers)
            gap = _write_gap(w.ack_times)
            print(
                f"\npg failover: write gap {gap:.2f} s, {len(w.acked)} acknowledged commits,"
                f" {w.retried} retried, {old.name} -> {new.name}"
            )
            await _assert_ledger_holds(pool, w.acked)
        finally:
            await listener.stop()
            await pool.close()


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
    """Every acknowledged commit at its seq, no key twice, an outbox row for every event."""
    rows = await pool.fetch(
        "SELECT e.dedupe_key, e.seq, o.id AS outbox_id FROM events e"
        " LEFT JOIN outbox o USING (tenant_id, session_id, seq) WHERE e.kind = 'user.message'"
    )
    keys = [str(r["dedupe_key"]).partition(":")[2] for r in rows]  # "<key field>:<key>"
    stored = dict(zip(keys, (int(r["seq"]) for r in rows), strict=True))
    twice = [k for k, n in Counter(keys).items() if n > 1]
    assert not twice, f"{len(twice)} duplicated commits, e.g. {twice[:5]}"
    lost = sorted(k for k, seq in acked.items() if stored.get(k) != seq)
    assert not lost, f"{len(lost)} acknowledged commits missing after failover, e.g. {lost[:5]}"
    assert all(r["outbox_id"] is not None for r in rows), "events without their outbox row"
