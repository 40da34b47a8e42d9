"""Per-tenant and per-key bounds of an API process (real PostgreSQL): one tenant holding its
maximum of streams or requests leaves room for another, a key's own bound leaves room for the
tenant's other keys, and the tenant's rates answer 429 with Retry-After. The bounds come from
the API's defaults and from the tenant document's `limits` part."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import asyncpg
import httpx

from keel_stream.api.tenant_limits import TenantLimits
from keel_stream.store import PostgresLedger
from keel_stream.store.keys import PostgresKeyStore
from keel_stream.store.tenant_configs import PostgresTenantConfigs
from tests.support.api import serve_api

SMALL = TenantLimits(max_streams=4, max_streams_per_key=3, max_in_flight=3, max_in_flight_per_key=2)


def code_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, str(response.json()["error"]["code"])


async def tenant_key(pool: asyncpg.Pool, tenant: str) -> str:
    with contextlib.suppress(Exception):
        await PostgresLedger(pool).create_tenant(tenant)
    return (await PostgresKeyStore(pool).create(tenant))[1]


@contextlib.asynccontextmanager
async def open_streams(
    client: httpx.AsyncClient, session: str, count: int
) -> AsyncIterator[list[httpx.Response]]:
    """`count` live SSE streams of the session (each answered 200), closed on exit."""
    async with contextlib.AsyncExitStack() as stack:
        opened = []
        for _ in range(count):
            response = await stack.enter_async_context(
                client.stream("GET", f"/v1/sessions/{session}/events/stream")
            )
            assert response.status_code == 200
            opened.append(response)
        yield opened


async def a_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/v1/sessions")
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def refused_stream(client: httpx.AsyncClient, session: str) -> httpx.Response:
    async with client.stream("GET", f"/v1/sessions/{session}/events/stream") as response:
        await response.aread()
        return response


async def test_tenant_b_opens_a_stream_while_tenant_a_holds_its_maximum(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    async with serve_api(database_dsn, tenant_limits=SMALL) as api:
        second_a = await tenant_key(pool, "acme")
        b_key = await tenant_key(pool, "beta")
        async with api.client() as a, api.client(second_a) as a2, api.client(b_key) as b:
            a_session, b_session = await a_session_pair(a, b)
            async with open_streams(a, a_session, 3), open_streams(a2, a_session, 1):
                over = await refused_stream(a2, a_session)
                assert code_of(over) == (429, "tenant_busy")
                assert int(over.headers["retry-after"]) >= 1
                async with open_streams(b, b_session, 1):
                    pass  # tenant B is served while A holds its four
                assert (await a.get(f"/v1/sessions/{a_session}")).status_code == 200
            async with open_streams(a, a_session, 3):
                by_key = await refused_stream(a, a_session)
                assert code_of(by_key) == (429, "tenant_busy"), "the key's own bound"
                async with open_streams(a2, a_session, 1):
                    pass  # the tenant's other key still has room


async def a_session_pair(a: httpx.AsyncClient, b: httpx.AsyncClient) -> tuple[str, str]:
    return await a_session(a), await a_session(b)


async def test_requests_in_flight_are_bounded_per_tenant_and_key(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    async with serve_api(database_dsn, tenant_limits=SMALL) as api:
        b_key = await tenant_key(pool, "beta")
        async with api.client() as a, api.client(b_key) as b:
            session = await a_session(a)
            await a.post(f"/v1/sessions/{session}/input", json={"text": "hi"})
            waiting = f"/v1/sessions/{session}/transcript"
            slow = {"min_seq": 1, "wait_s": 10}  # no projector runs: each waits its 10 s
            held = [asyncio.create_task(a.get(waiting, params=slow)) for _ in range(2)]

            async def key_at_its_bound() -> httpx.Response:
                deadline = asyncio.get_running_loop().time() + 10
                while True:
                    answer = await a.get(f"/v1/sessions/{session}")
                    if answer.status_code == 429 or asyncio.get_running_loop().time() > deadline:
                        return answer
                    await asyncio.sleep(0.05)

            assert code_of(await key_at_its_bound()) == (429, "tenant_busy")
            assert (await b.get("/v1/sessions")).status_code == 200, "another tenant is served"
            for task in held:
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)


async def test_the_tenant_documents_rates_answer_429_with_retry_after(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    await tenant_key(pool, "acme")
    await PostgresTenantConfigs(pool).put(
        "acme", {"limits": {"inputsPerSecond": 3, "sessionsPerMinute": 2}}
    )
    async with serve_api(database_dsn) as api:
        b_key = await tenant_key(pool, "beta")
        async with api.client() as a, api.client(b_key) as b:
            session = await a_session(a)
            await a_session(a)
            too_many = await a.post("/v1/sessions")
            assert code_of(too_many) == (429, "rate_limited")
            assert 1 <= int(too_many.headers["retry-after"]) <= 60
            answers = [
                await a.post(f"/v1/sessions/{session}/input", json={"text": f"m{i}"})
                for i in range(5)
            ]
            assert [r.status_code for r in answers[:3]] == [201] * 3
            assert code_of(answers[3]) == (429, "rate_limited")
            assert int(answers[3].headers["retry-after"]) == 1
            other = await a_session(b)
            for i in range(5):
                sent = await b.post(f"/v1/sessions/{other}/input", json={"text": f"m{i}"})
                assert sent.status_code == 201, "another tenant's rate is its own"
            events = (await a.get(f"/v1/sessions/{session}/events")).json()["events"]
            assert [e["payload"]["text"] for e in events] == ["m0", "m1", "m2"]
