"""Two projector instances in one consumer group: the partitions split between them, and when
one is SIGKILLed the other takes its partitions, resuming each at the offset stored with the
read models; the read models end equal to the fold of the ledger."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import asyncpg

from keel_stream.kafka.partitions import key_partition
from keel_stream.kafka.records import record_key
from keel_stream.relay import RelayConfig
from keel_stream.store.postgres import PostgresLedger
from keel_stream.topics.catalog import EVENTS
from tests.support.kafka import KafkaServer
from tests.support.ledger import converse_all, make_sessions
from tests.support.projector import (
    Assignment,
    ProjectorProcess,
    models_equal_ledger_fold,
    projector,
    stored_offsets,
)
from tests.support.relays import relay_task
from tests.support.wait import wait_until

SESSIONS = 18
"""s00..s17: a session on every partition of the events topic."""
STEP_S = 40
"""Each step's deadline: the steps together stay within the suite's 120 s per test."""
FAST_REBALANCE = {"KEEL_KAFKA_SESSION_TIMEOUT_S": "6"}
"""A dead member is noticed after this (the broker's smallest session timeout by default)."""
ALL = set(range(EVENTS.partitions))


async def converse_until(
    ledger: PostgresLedger, pool: asyncpg.Pool, sessions: list[str], stop: asyncio.Event
) -> int:
    """Rounds of one agent turn in every session until `stop`; how many rounds."""
    rounds = 0
    while not stop.is_set():
        await converse_all(ledger, pool, sessions, cycles=1, start=rounds, pace_s=0.1)
        rounds += 1
    return rounds


def running(*projectors: ProjectorProcess) -> None:
    for projector_ in projectors:
        assert projector_.process is not None
        exited = projector_.process.returncode
        assert exited is None, (
            f"a projector exited ({exited}):\n{projector_.log.read_text()[-3000:]}"
        )


async def step(
    condition: Callable[[], Awaitable[bool]], what: str, *projectors: ProjectorProcess
) -> None:
    """wait_until, failing with what each projector was assigned and last logged."""
    try:
        await wait_until(condition, STEP_S, what)
    except TimeoutError as exc:
        seen = [f"{p.log.name}: {p.assigned()}\n{p.log.read_text()[-2000:]}" for p in projectors]
        raise AssertionError("\n".join([str(exc), *seen])) from exc


def split(a: ProjectorProcess, b: ProjectorProcess) -> bool:
    running(a, b)
    mine, theirs = a.assigned(), b.assigned()
    return bool(mine and theirs and not mine & theirs and mine | theirs == ALL)


def takeover_of(survivor: ProjectorProcess) -> Assignment | None:
    """The survivor's first assignment of every partition after its last share of the split
    (alone at the start, it may have held every partition once before)."""
    seen = survivor.assignments()
    shared = [i for i, a in enumerate(seen) if a.partitions != ALL]
    after = seen[shared[-1] + 1 :] if shared else []
    return next((a for a in after if a.partitions == ALL), None)


async def test_two_projectors_split_the_partitions_and_the_survivor_takes_the_killed_ones(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    kafka: KafkaServer,
    topic_prefix: str,
    tmp_path: Path,
) -> None:
    sessions = await make_sessions(ledger, SESSIONS)
    assert {key_partition(record_key("acme", s), EVENTS.partitions) for s in sessions} == ALL
    stop = asyncio.Event()
    args = (database_dsn, kafka.bootstrap, topic_prefix)
    async with (
        relay_task(RelayConfig(database_dsn, kafka.settings, topic_prefix)),
        projector(*args, tmp_path / "a", **FAST_REBALANCE) as survivor,
        projector(*args, tmp_path / "b", **FAST_REBALANCE) as victim,
    ):

        async def both_hold_half() -> bool:
            return split(survivor, victim)

        both = (survivor, victim)
        await step(both_hold_half, "the two projectors to split the partitions", *both)
        taken = victim.assigned()
        assert taken
        writing = asyncio.create_task(converse_until(ledger, pool, sessions, stop))
        try:

            async def both_applied() -> bool:
                running(survivor, victim)
                offsets = await stored_offsets(pool)
                return all(offsets.get(p, 0) > 0 for p in ALL)

            await step(both_applied, "both projectors to apply records", *both)
            await victim.stop(signal.SIGKILL)
            killed_at = time.monotonic()
            stored = await stored_offsets(pool)

            async def survivor_holds_all() -> bool:
                running(survivor)
                return survivor.assigned() == ALL

            await step(survivor_holds_all, "the survivor to take every partition", *both)
            takeover_s = time.monotonic() - killed_at

            async def resumed_the_taken() -> bool:
                takeover = takeover_of(survivor)
                return takeover is not None and set(takeover.first) >= taken

            await step(resumed_the_taken, "records of the taken partitions", *both)
        finally:
            stop.set()
            rounds = await writing
        await step(lambda: models_equal_ledger_fold(pool), "the ledger's fold", *both)
    # Each taken partition resumed exactly where the killed projector's last transaction left
    # it: nothing it applied is applied again, nothing after it is skipped.
    takeover = takeover_of(survivor)
    assert takeover is not None
    assert {p: takeover.first[p] for p in taken} == {p: stored.get(p, 0) for p in taken}
    assert rounds >= 2, "commits were flowing across the kill"
    print(f"partitions {sorted(taken)} taken over {takeover_s:.1f}s after the SIGKILL")
