"""Two relay shards (`keel-stream relay --shard 0|1`, KEEL_RELAY_SHARDS=2), each an active relay
and a standby, SIGKILLed in turn under steady commits of several tenants: each shard publishes
its own tenants only (a shard with no relay holds back only its tenants), and every ledger event
reaches keel.events.v1, in seq order per session."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import defaultdict

import asyncpg

from keel_stream.kafka.admin import high_water_marks
from keel_stream.kernel import CommitRequest
from keel_stream.store import PostgresLedger
from keel_stream.topics.catalog import EVENTS
from tests.support.kafka import KafkaServer, Received, collect
from tests.support.ledger import outbox_empty
from tests.support.relays import RelayFleet, active_relay_pid
from tests.support.wait import wait_until

SHARDS = 2
TENANTS = ["t0", "t1", "t2", "t5", "t6", "t8"]
"""Three tenants of each shard (the test checks it)."""
SESSIONS = [(tenant, f"s{n}") for tenant in TENANTS for n in range(3)]
KILLS = 6
RELAY_ENV = {
    "KEEL_RELAY_SHARDS": str(SHARDS),
    "KEEL_RELAY_POLL_INTERVAL_S": "0.1",
    "KEEL_RELAY_BATCH_SIZE": "50",
}
_SHARD_OF = "SELECT (hashtext($1)::bigint & 2147483647) % $2::int"
"""The shard of a tenant, as the relay's fetch computes it (relay_fetch_batch_excluding.sql)."""
Key = tuple[str, str]


async def commit_until(ledger: PostgresLedger, stop: asyncio.Event) -> int:
    """User messages round-robin over every session of every tenant until stop; how many."""
    counter = itertools.count()
    done = 0
    while not stop.is_set():
        i = next(counter)
        tenant, session = SESSIONS[i % len(SESSIONS)]
        request = CommitRequest(
            tenant_id=tenant, session_id=session, kind="user.message",
            payload={"text": f"event {i}"}, key=f"r{i}",
        )  # fmt: skip
        await ledger.commit(request)
        done += 1
        await asyncio.sleep(0.005)
    return done


async def waiting_by_shard(pool: asyncpg.Pool, shards: dict[str, int]) -> dict[int, int]:
    rows = await pool.fetch("SELECT tenant_id, count(*) AS n FROM outbox GROUP BY tenant_id")
    waiting = dict.fromkeys(range(SHARDS), 0)
    for row in rows:
        waiting[shards[row["tenant_id"]]] += row["n"]
    return waiting


async def kill_active(pool: asyncpg.Pool, fleet: RelayFleet, shard: int) -> None:
    """SIGKILL the shard's active relay once it leads and publishes; start a new standby."""

    async def leading() -> bool:
        pid = await active_relay_pid(pool, shard)
        return pid is not None and any(r.pid == pid for r in fleet.relays)

    await wait_until(leading, 30, f"a relay to lead shard {shard}")
    pid = await active_relay_pid(pool, shard)
    assert pid is not None
    await fleet.with_pid(pid).kill()
    await fleet.start()


async def only_its_tenants_wait(
    ledger: PostgresLedger, pool: asyncpg.Pool, shard_of: dict[str, int]
) -> int:
    """With no relay for shard 0, one event in every session: shard 1 publishes its own and
    shard 0's stay in the outbox. How many events were committed."""
    for tenant, session in SESSIONS:
        request = CommitRequest(
            tenant_id=tenant, session_id=session, kind="user.message", payload={"text": "late"}
        )
        await ledger.commit(request)

    async def shard_one_drained() -> bool:
        return (await waiting_by_shard(pool, shard_of))[1] == 0

    await wait_until(shard_one_drained, 30, "shard 1 to drain while shard 0 has no relay")
    waiting = await waiting_by_shard(pool, shard_of)
    assert waiting[0] == sum(1 for t, _ in SESSIONS if shard_of[t] == 0), waiting
    return len(SESSIONS)


def arrivals(received: list[Received]) -> dict[Key, list[int]]:
    seqs: dict[Key, list[int]] = defaultdict(list)
    for record in received:
        seqs[(record.event.tenant, record.event.session)].append(record.event.seq)
    return seqs


async def test_two_relay_shards_publish_their_own_tenants_and_survive_kills_in_order(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, kafka: KafkaServer,
    topic_prefix: str,
) -> None:  # fmt: skip
    shard_of = {t: await pool.fetchval(_SHARD_OF, t, SHARDS) for t in TENANTS}
    assert sorted(shard_of.values()) == [0, 0, 0, 1, 1, 1]
    for tenant, session in SESSIONS:
        if session == "s0":
            await ledger.create_tenant(tenant)
        await ledger.create_session(tenant, session)
    args = (database_dsn, kafka.bootstrap, topic_prefix)
    rng = random.Random(28)
    stop = asyncio.Event()
    async with RelayFleet(*args, **RELAY_ENV) as zero, RelayFleet(*args, **RELAY_ENV) as one:
        one.shard = 1
        fleets = (zero, one)
        for fleet in fleets:
            await fleet.start()
            await fleet.start()
        writing = asyncio.create_task(commit_until(ledger, stop))
        try:
            for kill in range(KILLS):
                await asyncio.sleep(rng.uniform(0.1, 0.4))
                await kill_active(pool, fleets[kill % SHARDS], kill % SHARDS)
        finally:
            stop.set()
            committed = await writing
        await wait_until(lambda: outbox_empty(pool), 60, "both shards to drain the outbox")
        await zero.kill_all()
        committed += await only_its_tenants_wait(ledger, pool, shard_of)
        await zero.start()
        await wait_until(lambda: outbox_empty(pool), 60, "shard 0's new relay to drain it")

    topic = EVENTS.full_name(topic_prefix)
    on_topic = sum((await high_water_marks(kafka.settings, topic)).values())
    received = await collect(kafka.bootstrap, topic, lambda got: len(got) >= on_topic, 60)
    heads = {
        (r["tenant_id"], r["session_id"]): r["last_seq"]
        for r in await pool.fetch("SELECT tenant_id, session_id, last_seq FROM sessions")
    }
    assert sum(heads.values()) == committed
    duplicates = 0
    for key, seqs in arrivals(received).items():
        first = list(dict.fromkeys(seqs))
        assert first == list(range(1, heads[key] + 1)), key
        duplicates += len(seqs) - len(first)
    assert len(received) == committed + duplicates
    print(f"{committed} events, {KILLS} kills over {SHARDS} shards, {duplicates} sent twice")
