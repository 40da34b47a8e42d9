"""Connections follow the tenant's document: a backend the document no longer declares (or
declares differently) is closed and its process group reclaimed, and nothing starts it again.
A real API on PostgreSQL, the reference sidecar over stdio."""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any

import asyncpg
import httpx

from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.smoke_runtime import processes_with
from keel_stream.store.tenant_configs import PostgresTenantConfigs
from tests.support.api import serve_api
from tests.support.wait import wait_until

DEADLINE_S = 20.0
QUIET_S = 4.0
"""Longer than a health check's failure count plus the first reconnect delays: a respawn of a
crashing backend would show within it."""


def _document(marker: str, *switches: str) -> dict[str, Any]:
    args = ["-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent", "--forbid-env", marker]
    backend = {"transport": "stdio", "command": sys.executable, "args": [*args, *switches]}
    return {"external": {"backends": {"ref": backend}, "quota": {"unmetered": "deny"}}}


async def _status(client: httpx.AsyncClient, session: str) -> str:
    status: str = (await client.get(f"/v1/sessions/{session}")).json()["external"]["status"]
    return status


async def _backends(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    listed: list[dict[str, Any]] = (await client.get("/v1/external/backends")).json()["backends"]
    return listed


async def test_a_removed_backend_is_closed_and_reclaimed_and_never_respawned(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    marker = f"KEEL_TEST_MARK_{uuid.uuid4().hex.upper()}"
    async with serve_api(database_dsn) as api, api.client() as client:
        # It crashes on its 5th message (a health check): a lost backend is restarted.
        await PostgresTenantConfigs(pool).put("acme", _document(marker, "--crash-after", "4"))
        opened = await client.post("/v1/sessions", json={"backend": "ref"})
        assert opened.status_code == 201, opened.text
        session = opened.json()["id"]
        audit = AuditLog.in_data_dir(api.config.data_dir)

        async def respawned() -> bool:
            return len(audit.records("provider.spawned")) >= 2

        await wait_until(respawned, DEADLINE_S, "the crashing backend started again")
        await PostgresTenantConfigs(pool).put("acme", {})

        async def gone() -> bool:
            return not processes_with(marker) and not await _backends(client)

        await wait_until(gone, DEADLINE_S, "the removed backend closed and reclaimed")
        await wait_until(
            lambda: _is_unavailable(client, session), DEADLINE_S, "its session unavailable"
        )
        spawned = len(audit.records("provider.spawned"))
        assert len(audit.records("provider.reclaimed")) == spawned, "every spawn was reclaimed"
        deadline = asyncio.get_running_loop().time() + QUIET_S
        while asyncio.get_running_loop().time() < deadline:
            assert not processes_with(marker), "a removed backend was started again"
            await asyncio.sleep(0.05)
        assert len(audit.records("provider.spawned")) == spawned
        sent = await client.post(f"/v1/sessions/{session}/input", json={"text": "hi"})
        assert sent.status_code == 409, sent.text
        assert sent.json()["error"]["code"] == "external_session_unavailable"
        assert not processes_with(marker), "a request for its session starts nothing"


async def test_a_changed_backend_replaces_the_old_process(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    marker = f"KEEL_TEST_MARK_{uuid.uuid4().hex.upper()}"
    async with serve_api(database_dsn) as api, api.client() as client:
        await PostgresTenantConfigs(pool).put("acme", _document(marker))
        opened = await client.post("/v1/sessions", json={"backend": "ref"})
        assert opened.status_code == 201, opened.text
        (old,) = processes_with(marker)
        await PostgresTenantConfigs(pool).put("acme", _document(marker, "--slow-ms", "1"))

        async def replaced() -> bool:
            return old not in processes_with(marker)

        await wait_until(replaced, DEADLINE_S, "the old backend process reclaimed")
        again = await client.post("/v1/sessions", json={"backend": "ref"})
        assert again.status_code == 201, again.text
        (new,) = processes_with(marker)
        assert new != old
        assert len(await _backends(client)) == 1, "only the declared backend is connected"


async def _is_unavailable(client: httpx.AsyncClient, session: str) -> bool:
    return await _status(client, session) == "backend-unavailable"
