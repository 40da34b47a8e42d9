"""The trigger scheduler on a real PostgreSQL: overlap policies, catch-up, max fires, crash
leftovers, racing replicas, new sessions and the trigger.* hook rows (docs/triggers.md).

Each trigger's first nominal time is moved into the past, so one tick plans a known backlog at
once: nothing waits on the wall clock."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import asyncpg
import orjson
import pytest

from keel_stream.clock import utc_now
from keel_stream.kernel import CommitRequest, Event, LeaseToken
from keel_stream.store import PostgresLedger
from keel_stream.store.hooks import PostgresHookStore
from keel_stream.store.triggers import NewTrigger, PostgresTriggerStore
from keel_stream.store.triggers_schedule import PostgresTriggerScheduleStore
from keel_stream.triggers.firing import plan_next
from keel_stream.triggers.models import CreateTrigger
from keel_stream.triggers.policy import message_payload
from keel_stream.triggers.scheduler import Scheduler, SchedulerConfig
from tests.support.ledger import grant_lease
from tests.support.wait import wait_until

TENANT = "acme"


@pytest.fixture
async def world(ledger: PostgresLedger) -> PostgresLedger:
    await ledger.create_tenant(TENANT)
    await ledger.create_session(TENANT, "s1")
    return ledger


async def make_trigger(pool: asyncpg.Pool, *, backlog_s: int = 0, **spec: Any) -> str:
    """A trigger firing every second whose first nominal time is backlog_s in the past."""
    document = {
        "kind": "schedule",
        "schedule": {"every": "1s", "catchupWindowS": 600},
        "target": {"session": "s1"},
        "input": {"text": "tick {{nominalTime}}"},
        **spec,
    }
    body = CreateTrigger.model_validate(document)
    trigger_id = f"tr_{secrets.token_hex(8)}"
    now = utc_now().replace(microsecond=0)
    first = now - timedelta(seconds=backlog_s)
    await PostgresTriggerStore(pool).create(
        NewTrigger(
            trigger_id, TENANT, "schedule", body.model_dump(mode="json", exclude_none=True),
            None, first, first,
        )
    )  # fmt: skip
    return trigger_id


def scheduler(pool: asyncpg.Pool, ledger: PostgresLedger, owner: str = "t") -> Scheduler:
    config = SchedulerConfig(database_url="unused", lease_s=30, owner=owner)
    return Scheduler(PostgresTriggerScheduleStore(pool), ledger, config)


async def firings(pool: asyncpg.Pool, trigger_id: str) -> list[Mapping[str, Any]]:
    rows: list[Mapping[str, Any]] = await pool.fetch(
        "SELECT * FROM trigger_firings WHERE trigger_id = $1 ORDER BY nominal_at", trigger_id
    )
    return rows


async def inputs(ledger: PostgresLedger, session: str = "s1") -> list[Event]:
    events = await ledger.read_events(TENANT, session, after=0, limit=1000)
    return [e for e in events if e.kind == "user.message"]


async def busy(pool: asyncpg.Pool) -> None:
    await grant_lease(pool, TENANT, "s1", LeaseToken(owner="w", epoch=1))


async def test_queue_fires_every_nominal_time_once_with_its_key(
    pool: asyncpg.Pool, world: PostgresLedger
) -> None:
    await busy(pool)
    trigger_id = await make_trigger(pool, backlog_s=3, overlap="queue", schedule={
        "every": "1s", "catchupWindowS": 600, "maxFires": 4})  # fmt: skip
    await scheduler(pool, world).tick()
    rows = await firings(pool, trigger_id)
    assert [(r["decision"], r["reason"], r["outcome"]) for r in rows] == [
        ("fire", "busy", "committed")
    ] * 4
    messages = await inputs(world)
    assert [m.payload["requestId"] for m in messages] == [
        f"trigger:{trigger_id}:{r['fire_key']}" for r in rows
    ]
    assert [m.seq for m in messages] == [r["seq"] for r in rows]
    assert all("delivery" not in m.payload for m in messages)
    first = messages[0].payload
    assert first["source"] == {
        "trigger": trigger_id, "nominalTime": rows[0]["fire_key"], "firingId": rows[0]["firing_id"]
    }  # fmt: skip
    assert first["text"] == f"tick {rows[0]['fire_key']}"
    state = await pool.fetchrow("SELECT * FROM triggers WHERE trigger_id = $1", trigger_id)
    assert state is not None
    assert (state["state"], state["fires"], state["next_fire_at"]) == ("completed", 4, None)


async def test_skip_records_skipped_firings_and_commits_nothing(
    pool: asyncpg.Pool, world: PostgresLedger
) -> None:
    await busy(pool)
    trigger_id = await make_trigger(pool, backlog_s=2, overlap="skip")
    await scheduler(pool, world).tick()
    rows = await firings(pool, trigger_id)
    assert len(rows) >= 3
    assert {(r["decision"], r["reason"], r["outcome"]) for r in rows} == {
        ("skip", "busy", "skipped")
    }
    assert await inputs(world) == []


async def test_buffer_one_keeps_one_firing_until_the_target_is_idle(
    pool: asyncpg.Pool, world: PostgresLedger
) -> None:
    await busy(pool)
    trigger_id = await make_trigger(pool, backlog_s=3, overlap="buffer_one")
    replica = scheduler(pool, world)
    await replica.tick()
    rows = await firings(pool, trigger_id)
    assert [(r["decision"], r["reason"], r["outcome"]) for r in rows[:2]] == [
        ("buffer", "busy", None),
        ("skip", "coalesced", "skipped"),
    ]
    assert {r["reason"] for r in rows[1:]} == {"coalesced"}
    await replica.tick()
    assert await inputs(world) == [], "still running: the buffered firing waits"
    await pool.execute("UPDATE runs SET status = 'done' WHERE session_id = 's1'")
    await replica.tick()
    buffered = (await firings(pool, trigger_id))[0]
    assert buffered["outcome"] == "committed"
    messages = await inputs(world)
    assert messages[0].payload["requestId"] == f"trigger:{trigger_id}:{buffered['fire_key']}"
    assert messages[0].seq == buffered["seq"]


async def test_guide_is_injected_into_the_running_attempt(
    pool: asyncpg.Pool, world: PostgresLedger
) -> None:
    await busy(pool)
    trigger_id = await make_trigger(pool, overlap="guide", schedule={
        "every": "1s", "catchupWindowS": 600, "maxFires": 1})  # fmt: skip
    await scheduler(pool, world).tick()
    (row,) = await firings(pool, trigger_id)
    assert (row["decision"], row["delivery"], row["outcome"]) == ("fire", "guide", "committed")
    (message,) = await inputs(world)
    assert message.payload["delivery"] == "guide", "a running attempt takes it as a guide"


async def test_cancel_other_cancels_the_running_attempt_then_fires(
    pool: asyncpg.Pool, world: PostgresLedger
) -> None:
    await busy(pool)
    trigger_id = await make_trigger(pool, overlap="cancel_other", schedule={
        "every": "1s", "catchupWindowS": 600, "maxFires": 1})  # fmt: skip
    await scheduler(pool, world).tick()
    (row,) = await firings(pool, trigger_id)
    assert (row["decision"], row["delivery"], row["outcome"]) == (
        "cancel_other",
        "queue",
        "committed",
    )
    assert await pool.fetchval("SELECT cancel_requested FROM runs WHERE session_id = 's1'")
    (message,) = await inputs(world)
    assert "delivery" not in message.payload


async def test_an_idle_target_is_fired_whatever_the_policy(
    pool: asyncpg.Pool, world: PostgresLedger
) -> None:
    trigger_id = await make_trigger(pool, overlap="skip", schedule={
        "every": "1s", "catchupWindowS": 600, "maxFires": 1})  # fmt: skip
    await scheduler(pool, world).tick()
    (row,) = await firings(pool, trigger_id)
    assert (row["decision"], row["reason"], row["outcome"]) == ("fire", "idle", "committed")


async def test_nominal_times_older_than_the_catchup_window_are_recorded_missed(
    pool: asyncpg.Pool, world: PostgresLedger
) -> None:
    trigger_id = await make_trigger(pool, backlog_s=100, overlap="queue", schedule={
        "every": "1s", "catchupWindowS": 10})  # fmt: skip
    await scheduler(pool, world).tick()
    rows = await firings(pool, trigger_id)
    missed = rows[0]
    assert (missed["decision"], missed["reason"], missed["outcome"]) == (
        "skip",
        "missed",
        "skipped",
    )
    assert 85 <= missed["detail"]["missed"] <= 91
    fired = rows[1:]
    assert 10 <= len(fired) <= 16, "only the window's nominal times fire"
    assert {r["outcome"] for r in fired} == {"committed"}
    assert len(await inputs(world)) == len(fired)


async def test_a_crash_between_commit_and_record_fires_once(
    pool: asyncpg.Pool, world: PostgresLedger
) -> None:
    trigger_id = await make_trigger(pool, schedule={
        "every": "1s", "catchupWindowS": 600, "maxFires": 1})  # fmt: skip
    store = PostgresTriggerScheduleStore(pool)
    (claimed,) = await store.claim("dead-replica", 0.2, 10)
    async with store.plan(claimed, "dead-replica") as tx:
        planned = await plan_next(tx, "dead-replica")
    firing = planned.firing
    assert firing is not None
    assert firing.outcome is None
    # The dead replica committed the message, then died before recording the outcome.
    payload = message_payload(
        trigger_id, firing.key, firing.nominal_at, firing.id, firing.message, firing.delivery
    )
    first = await world.commit(CommitRequest(tenant_id=TENANT, session_id="s1",
                                             kind="user.message", payload=payload))  # fmt: skip
    survivor = scheduler(pool, world, owner="survivor")

    async def finished() -> bool:
        await survivor.tick()
        (row,) = await firings(pool, trigger_id)
        return row["outcome"] is not None

    await wait_until(finished, 10, "the survivor to finish the dead replica's firing")
    (row,) = await firings(pool, trigger_id)
    assert (row["outcome"], row["seq"], row["created"]) == ("committed", first.seq, False)
    assert len(await inputs(world)) == 1


async def test_racing_replicas_plan_each_nominal_time_once(
    pool: asyncpg.Pool, world: PostgresLedger
) -> None:
    ids = [await make_trigger(pool, backlog_s=20, overlap="queue") for _ in range(4)]
    replicas = [scheduler(pool, world, owner=f"r{n}") for n in range(3)]
    for _ in range(3):
        await asyncio.gather(*(r.tick() for r in replicas))
    for trigger_id in ids:
        rows = await firings(pool, trigger_id)
        keys = [r["fire_key"] for r in rows]
        assert len(keys) == len(set(keys)) >= 21
        assert {r["outcome"] for r in rows} == {"committed"}
    messages = await inputs(world)
    request_ids = [m.payload["requestId"] for m in messages]
    assert len(request_ids) == len(set(request_ids))
    total = await pool.fetchval("SELECT count(*) FROM trigger_firings")
    assert len(messages) == total


async def test_new_session_targets_are_derived_from_trigger_and_nominal_time(
    pool: asyncpg.Pool, world: PostgresLedger
) -> None:
    trigger_id = await make_trigger(pool, backlog_s=1, target={"newSession": True}, schedule={
        "every": "1s", "catchupWindowS": 600, "maxFires": 2})  # fmt: skip
    await scheduler(pool, world).tick()
    rows = await firings(pool, trigger_id)
    assert [r["session_id"] for r in rows] == [f"{trigger_id}-{r['fire_key']}" for r in rows]
    for row in rows:
        (message,) = await inputs(world, row["session_id"])
        assert message.seq == row["seq"] == 1
    status = await pool.fetchval(
        "SELECT status FROM runs WHERE session_id = $1", rows[0]["session_id"]
    )
    assert status == "pending", "the commit makes the new session owe a run"


async def test_firings_write_trigger_before_and_after_hook_rows(
    pool: asyncpg.Pool, world: PostgresLedger
) -> None:
    hook = await PostgresHookStore(pool).create(
        TENANT, "https://example.com/h", ["trigger.before", "trigger.after"], None, None, "whsec_x"
    )
    await busy(pool)
    fired = await make_trigger(pool, overlap="queue", schedule={
        "every": "1s", "catchupWindowS": 600, "maxFires": 1})  # fmt: skip
    skipped = await make_trigger(pool, overlap="skip", schedule={
        "every": "1s", "catchupWindowS": 600, "maxFires": 1})  # fmt: skip
    await scheduler(pool, world).tick()
    rows = await pool.fetch(
        "SELECT * FROM hook_deliveries WHERE hook_id = $1 ORDER BY delivery_id", hook.id
    )
    bodies = {(orjson.loads(r["body"])["data"]["trigger"], r["hook"]): r for r in rows}
    assert len(rows) == 4
    before = orjson.loads(bodies[(fired, "trigger.before")]["body"])
    assert before["type"] == "trigger.before"
    assert before["data"]["decision"] == "fire"
    assert before["data"]["session"] == "s1"
    after = orjson.loads(bodies[(fired, "trigger.after")]["body"])["data"]
    (firing,) = await firings(pool, fired)
    assert (after["outcome"], after["seq"], after["created"]) == ("committed", firing["seq"], True)
    assert orjson.loads(bodies[(skipped, "trigger.after")]["body"])["data"]["outcome"] == "skipped"
    webhook_ids = {r["webhook_id"] for r in rows}
    assert len(webhook_ids) == 4


async def test_a_buffered_firing_outlives_the_trigger_completing(
    pool: asyncpg.Pool, world: PostgresLedger
) -> None:
    await busy(pool)
    trigger_id = await make_trigger(pool, overlap="buffer_one", schedule={
        "every": "1s", "catchupWindowS": 600, "maxFires": 1})  # fmt: skip
    replica = scheduler(pool, world)
    await replica.tick()
    state = await pool.fetchval("SELECT state FROM triggers WHERE trigger_id = $1", trigger_id)
    assert state == "completed"
    await pool.execute("UPDATE runs SET status = 'done' WHERE session_id = 's1'")
    await replica.tick()
    (row,) = await firings(pool, trigger_id)
    assert (row["decision"], row["outcome"]) == ("buffer", "committed")
    assert len(await inputs(world)) == 1
