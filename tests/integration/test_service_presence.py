"""`hooks` and `triggers` in GET /v1/capabilities are true only while a hooks sender and a
trigger scheduler run, and /readyz names the one missing without leaving rotation for it: each
such process beats a row in service_heartbeats while it runs (docs/operations.md#readiness)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import asyncpg
import httpx

from keel_stream.api.presence import CACHE_S
from keel_stream.triggers.scheduler import SchedulerConfig, run_scheduler
from tests.support.api import serve_api
from tests.support.cli import keel_process
from tests.support.hook_receiver import fast_config, hooks_task
from tests.support.wait import wait_until

HEARTBEAT_S = 0.5
BOUND_S = 3 * HEARTBEAT_S
"""The freshness bound of a process beating every HEARTBEAT_S (three missed beats)."""


async def running(client: httpx.AsyncClient) -> tuple[bool, bool]:
    """(hooks, triggers) as the capabilities say now."""
    features = (await client.get("/v1/capabilities")).json()["features"]
    return features["hooks"], features["triggers"]


async def named(client: httpx.AsyncClient) -> tuple[int, str, str]:
    """/readyz's status code and what it says of the sender and the scheduler."""
    ready = await client.get("/readyz")
    deps = ready.json()["dependencies"]
    return ready.status_code, deps["hooksSender"]["status"], deps["triggerScheduler"]["status"]


async def test_hooks_and_triggers_are_capabilities_only_while_a_sender_and_a_scheduler_run(
    database_dsn: str,
) -> None:
    async with serve_api(database_dsn) as api, api.client() as client:
        assert await running(client) == (False, False)
        assert await named(client) == (200, "missing", "missing"), "readiness is for traffic"
        async with hooks_task(fast_config(database_dsn, None, "")):

            async def hooks_only() -> bool:
                return await running(client) == (True, False)

            await wait_until(hooks_only, 10, "hooks true once a sender runs")
            stop = asyncio.Event()
            scheduler = asyncio.create_task(
                run_scheduler(SchedulerConfig(database_dsn, poll_s=0.1), stop)
            )
            try:

                async def both() -> bool:
                    return await running(client) == (True, True)

                await wait_until(both, 10, "triggers true once a scheduler runs")
                assert await named(client) == (200, "running", "running")
            finally:
                stop.set()
                await asyncio.wait_for(scheduler, 30)
            # A graceful stop removes the row: false well before a default beat (5 s) is missed.
            await wait_until(hooks_only, CACHE_S + 2, "triggers false once the scheduler stopped")

        async def none() -> bool:
            return await running(client) == (False, False)

        await wait_until(none, CACHE_S + 2, "hooks false once the sender stopped")
        assert await named(client) == (200, "missing", "missing")


async def test_a_killed_sender_and_scheduler_are_missing_once_their_beats_are_stale(
    database_dsn: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    env = {"KEEL_DATABASE_URL": database_dsn, "KEEL_SERVICE_HEARTBEAT_INTERVAL_S": f"{HEARTBEAT_S}"}
    async with (
        serve_api(database_dsn) as api,
        api.client() as client,
        keel_process("hooks", "run", env=env, log=tmp_path / "hooks.log") as hooks,
        keel_process("triggers", "run", env=env, log=tmp_path / "triggers.log") as triggers,
    ):

        async def both() -> bool:
            return await running(client) == (True, True)

        await wait_until(both, 60, "hooks and triggers true once both processes beat")
        for process in (hooks, triggers):
            process.send_signal(signal.SIGKILL)
            await process.wait()

        async def none() -> bool:
            return await running(client) == (False, False)

        await wait_until(none, BOUND_S + CACHE_S + 2, "both false once the beats are stale")
        rows = await pool.fetchval("SELECT count(*) FROM service_heartbeats")
        assert rows == 2, "a SIGKILL removes nothing: the rows went stale"
        assert await named(client) == (200, "missing", "missing")
