"""Fair slots: one tenant's slow runs cannot hold a worker's every slot while another tenant's
input waits, and a per-tenant cap bounds a tenant's running attempts across workers."""

from __future__ import annotations

import asyncpg

from keel_stream.kernel import CommitRequest
from keel_stream.store import PostgresLedger
from tests.support.wait import wait_until
from tests.support.workers import worker_task

SLOW = '[[tool:sleep {"seconds": 30}]]'


async def say(ledger: PostgresLedger, tenant: str, session: str, text: str) -> None:
    await ledger.create_session(tenant, session)
    request = CommitRequest(
        tenant_id=tenant, session_id=session, kind="user.message", payload={"text": text}
    )
    await ledger.commit(request)


async def statuses(pool: asyncpg.Pool, tenant: str) -> list[str]:
    rows = await pool.fetch("SELECT status FROM runs WHERE tenant_id = $1", tenant)
    return [str(r["status"]) for r in rows]


async def test_a_tenant_filling_the_slots_with_slow_tools_does_not_delay_another(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str
) -> None:
    for tenant in ("slowco", "quickco"):
        await ledger.create_tenant(tenant)
    for index in range(4):
        await say(ledger, "slowco", f"slow{index}", SLOW)
    async with worker_task(database_dsn, slots=4):

        async def slow_tools_running() -> bool:
            return (await statuses(pool, "slowco")).count("running") == 3

        await wait_until(slow_tools_running, 30, "three of slowco's runs to be running")
        assert (await statuses(pool, "slowco")).count("pending") == 1, "one slot stays open"
        await say(ledger, "quickco", "q1", "hello")

        async def answered() -> bool:
            return await statuses(pool, "quickco") == ["done"]

        # slowco's tools sleep 30 s: an answer within 15 s used the slot kept open.
        await wait_until(answered, 15, "quickco's input to be answered beside slowco's tools")
        assert "done" not in await statuses(pool, "slowco")


async def test_the_tenant_cap_holds_across_workers(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str
) -> None:
    await ledger.create_tenant("capped")
    for index in range(4):
        await say(ledger, "capped", f"c{index}", SLOW)
    async with (
        worker_task(database_dsn, slots=4, tenant_max_running=2),
        worker_task(database_dsn, slots=4, tenant_max_running=2),
    ):

        async def two_running() -> bool:
            return (await statuses(pool, "capped")).count("running") == 2

        await wait_until(two_running, 30, "two of the capped tenant's runs to be running")
        # Another tenant's input answered proves the workers claimed again after the cap was
        # reached; the capped tenant still runs two.
        await ledger.create_tenant("other")
        await say(ledger, "other", "o1", "hello")

        async def other_answered() -> bool:
            return await statuses(pool, "other") == ["done"]

        await wait_until(other_answered, 15, "the other tenant's input to be answered")
        assert sorted(await statuses(pool, "capped")) == [
            "pending",
            "pending",
            "running",
            "running",
        ]
