"""A schedule firing every second for twenty seconds (ten lease lifetimes), with two
`keel-stream triggers run` replicas and one of them SIGKILLed part way: every nominal time is
fired exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta
from pathlib import Path

import asyncpg
import pytest

from keel_stream.clock import utc_now
from keel_stream.store import PostgresLedger
from keel_stream.store.triggers import NewTrigger, PostgresTriggerStore
from keel_stream.triggers.models import CreateTrigger
from keel_stream.triggers.schedule import fire_key
from tests.support.wait import wait_until

FIRES = 20


async def start_replica(dsn: str, log: Path) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "KEEL_DATABASE_URL": dsn,
        "KEEL_TRIGGERS_LEASE_TTL_S": "2",
        "KEEL_TRIGGERS_POLL_INTERVAL_S": "0.1",
    }
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            sys.executable, "-m", "keel_stream", "triggers", "run", env=env,
            stdout=out, stderr=out,
        )  # fmt: skip


async def planned_by(pool: asyncpg.Pool) -> list[str]:
    rows = await pool.fetch("SELECT planned_by FROM trigger_firings ORDER BY nominal_at")
    return [row["planned_by"] for row in rows]


@pytest.mark.timeout(240)
async def test_every_second_for_twenty_seconds_with_a_replica_killed_fires_each_time_once(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, tmp_path: Path
) -> None:
    await ledger.create_tenant("acme")
    await ledger.create_session("acme", "s1")
    spec = CreateTrigger.model_validate({
        "kind": "schedule",
        "schedule": {"every": "1s", "catchupWindowS": 60, "maxFires": FIRES},
        "target": {"session": "s1"},
        "input": {"text": "tick"},
        "overlap": "queue",
    })  # fmt: skip
    first = utc_now().replace(microsecond=0) + timedelta(seconds=3)
    trigger_id = "tr_00000000000000aa"
    await PostgresTriggerStore(pool).create(
        NewTrigger(trigger_id, "acme", "schedule", spec.model_dump(mode="json", exclude_none=True),
                   None, first, first)
    )  # fmt: skip
    replicas = [await start_replica(database_dsn, tmp_path / f"r{n}.log") for n in range(2)]
    try:

        async def fired(count: int) -> bool:
            return len(await planned_by(pool)) >= count

        await wait_until(lambda: fired(FIRES // 3), 60, "a third of the fires")
        owner = (await planned_by(pool))[-1]
        victim = next(r for r in replicas if owner.endswith(f":{r.pid}"))
        victim.send_signal(signal.SIGKILL)
        await victim.wait()
        killed_at = len(await planned_by(pool))

        async def completed() -> bool:
            state = await pool.fetchval("SELECT state FROM triggers WHERE trigger_id = $1",
                                        trigger_id)  # fmt: skip
            open_ = await pool.fetchval(
                "SELECT count(*) FROM trigger_firings WHERE outcome IS NULL"
            )
            return bool(state == "completed" and open_ == 0)

        await wait_until(completed, 150, "the trigger's twenty fires")
    finally:
        for replica in replicas:
            if replica.returncode is None:
                replica.send_signal(signal.SIGTERM)
                await asyncio.wait_for(replica.wait(), 30)
    survivor = next(r for r in replicas if r is not victim)
    assert survivor.returncode == 0
    rows = await pool.fetch("SELECT * FROM trigger_firings ORDER BY nominal_at")
    expected = [fire_key(first + timedelta(seconds=n)) for n in range(FIRES)]
    assert [r["fire_key"] for r in rows] == expected, "each nominal time planned, once"
    assert {(r["decision"], r["outcome"]) for r in rows} == {("fire", "committed")}
    owners = [r["planned_by"] for r in rows]
    assert set(owners[killed_at:]) == {owners[-1]} != {owner}, "the survivor fired the rest"
    events = await ledger.read_events("acme", "s1", after=0, limit=1000)
    messages = [e for e in events if e.kind == "user.message"]
    assert [m.payload["requestId"] for m in messages] == [
        f"trigger:{trigger_id}:{key}" for key in expected
    ], "each nominal time committed exactly once, in order"
    assert [m.seq for m in messages] == [r["seq"] for r in rows]
