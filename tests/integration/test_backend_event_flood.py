"""A backend's event flood is held to its tenant's rate (real PostgreSQL, the reference sidecar
over stdio with `--flood`): the gateway reads the backend's events no faster than the tenant's
`limits.backendEventsPerSecond`, so its pipe fills and it blocks (backpressure), every event
read is committed in the backend's order, and another tenant's backend is served meanwhile. A
flood that outlasts the grace fails the backend loudly: audited, its sessions unavailable."""

from __future__ import annotations

import sys
import time
from typing import Any

import asyncpg
import httpx

from keel_stream.api.tenant_limits import TenantLimits
from keel_stream.gateway.audit import AuditLog
from keel_stream.kernel import Event
from keel_stream.store import PostgresLedger
from keel_stream.store.protocol import MAX_READ_LIMIT
from keel_stream.store.tenant_configs import PostgresTenantConfigs
from tests.integration.test_tenant_limits import tenant_key
from tests.support.api import serve_api
from tests.support.wait import wait_until

RATE = 100
FLOOD = 2000
WINDOW_S = 6.0
"""How long the flood's commit rate is measured (well within the default grace)."""


def _document(*switches: str, limits: dict[str, int] | None = None) -> dict[str, Any]:
    args = ["-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent", *switches]
    backend = {"transport": "stdio", "command": sys.executable, "args": args}
    document: dict[str, Any] = {
        "external": {"backends": {"ref": backend}, "quota": {"unmetered": "deny"}}
    }
    if limits:
        document["limits"] = limits
    return document


async def _open_and_send(client: httpx.AsyncClient, text: str) -> str:
    opened = await client.post("/v1/sessions", json={"backend": "ref"})
    assert opened.status_code == 201, opened.text
    session = str(opened.json()["id"])
    sent = await client.post(f"/v1/sessions/{session}/input", json={"text": text})
    assert sent.status_code == 201, sent.text
    return session


class Inbound:
    """The backend events committed to one session so far, read page by page."""

    def __init__(self, ledger: PostgresLedger, tenant: str, session: str) -> None:
        self.ledger, self.tenant, self.session = ledger, tenant, session
        self.events: list[Event] = []
        self.lifecycle: list[Event] = []
        self._after = 0

    async def read(self) -> int:
        while True:
            page = await self.ledger.read_events(
                self.tenant, self.session, after=self._after, limit=MAX_READ_LIMIT
            )
            for event in page:
                direction = event.payload.get("direction")
                if direction == "inbound":
                    self.events.append(event)
                elif direction == "lifecycle":
                    self.lifecycle.append(event)
            if page:
                self._after = page[-1].seq
            if len(page) < MAX_READ_LIMIT:
                return len(self.events)

    def backend_seqs(self) -> list[int]:
        return [int(e.payload["backendSeq"]) for e in self.events]


async def _finished(client: httpx.AsyncClient, session: str) -> bool:
    events = (await client.get(f"/v1/sessions/{session}/events")).json()["events"]
    return any(e["payload"].get("type") == "turn.finished" for e in events)


async def test_a_backend_event_flood_is_held_to_the_tenant_rate(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    ledger = PostgresLedger(pool)
    b_key = await tenant_key(pool, "beta")
    await tenant_key(pool, "acme")
    flooding = _document("--flood", str(FLOOD), limits={"backendEventsPerSecond": RATE})
    await PostgresTenantConfigs(pool).put("acme", flooding)
    await PostgresTenantConfigs(pool).put("beta", _document())
    async with serve_api(database_dsn) as api, api.client() as a, api.client(b_key) as b:
        session = await _open_and_send(a, "flood")
        inbound = Inbound(ledger, "acme", session)

        async def begun() -> bool:
            return await inbound.read() >= RATE // 2

        await wait_until(begun, 10, "the flood's first events committed")
        first, started = len(inbound.events), time.monotonic()
        other = await _open_and_send(b, "hello")
        await wait_until(lambda: _finished(b, other), 5, "tenant B's turn answered meanwhile")

        async def window_over() -> bool:
            await inbound.read()
            return time.monotonic() - started >= WINDOW_S

        await wait_until(window_over, WINDOW_S + 5, "the measured window", interval_s=0.2)
        committed, elapsed = await inbound.read() - first, time.monotonic() - started
        measured = committed / elapsed
        print(f"flood held to {measured:.1f} events/s ({committed} in {elapsed:.1f} s)")
        assert measured <= RATE * 1.1, f"{measured:.0f} events/s committed, over {RATE}/s"
        assert measured >= RATE * 0.5, f"only {measured:.0f} events/s: the flood is starved"
        assert inbound.backend_seqs() == list(range(1, len(inbound.events) + 1)), (
            "every event read is committed, in the backend's order, none skipped"
        )
        status = (await a.get(f"/v1/sessions/{session}")).json()["external"]["status"]
        assert status == "active", "held to the rate within the grace, not failed"
        assert not AuditLog.in_data_dir(api.config.data_dir).records("backend.flooded")


async def test_a_backend_flooding_past_its_grace_is_failed_loudly(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    ledger = PostgresLedger(pool)
    await tenant_key(pool, "acme")
    await PostgresTenantConfigs(pool).put("acme", _document("--flood", str(FLOOD)))
    limits = TenantLimits(backend_events_per_second=RATE, backend_flood_grace_s=2.0)
    async with serve_api(database_dsn, tenant_limits=limits) as api, api.client() as a:
        session = await _open_and_send(a, "flood")
        inbound = Inbound(ledger, "acme", session)

        async def unavailable() -> bool:
            await inbound.read()
            return any(e.payload["type"] == "backend.unavailable" for e in inbound.lifecycle)

        await wait_until(unavailable, 15, "the flooding backend failed")
        (marked,) = [e for e in inbound.lifecycle if e.payload["type"] == "backend.unavailable"]
        assert "event flood" in marked.payload["data"]["reason"]
        audit = AuditLog.in_data_dir(api.config.data_dir)
        (flooded,) = audit.records("backend.flooded")
        assert (flooded["backend"], flooded["tenant"], flooded["perSecond"]) == (
            "ref",
            "acme",
            RATE,
        )

        async def reclaimed() -> bool:
            return bool(audit.records("provider.reclaimed"))

        await wait_until(reclaimed, 10, "the flooding backend's process group reclaimed")
        await inbound.read()
        assert 0 < len(inbound.events) < FLOOD
        assert inbound.backend_seqs() == list(range(1, len(inbound.events) + 1))
        status = (await a.get(f"/v1/sessions/{session}")).json()["external"]["status"]
        assert status == "backend-unavailable"
