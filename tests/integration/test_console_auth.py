"""The console's sign-in: a token cookie (never the key), its guard on writes, sign-out that
ends it, a revoked key that ends it, throttled failures, the __Host- cookie over HTTPS."""

from __future__ import annotations

import asyncpg
import httpx

from keel_stream.store.keys import PostgresKeyStore
from tests.support.api import serve_api


async def test_cookie_writes_need_the_console_header_and_keys_stay_out_of_urls(
    database_dsn: str,
) -> None:
    async with serve_api(database_dsn) as api, httpx.AsyncClient(base_url=api.url) as client:
        refused = await client.post("/console/login", data={"key": "nope"})
        assert refused.status_code == 401
        signed = await client.post("/console/login", data={"key": api.key})
        assert signed.status_code == 303
        cookie = signed.headers["set-cookie"].lower()
        assert "httponly" in cookie
        assert "samesite=strict" in cookie
        assert api.key not in signed.headers["location"]
        forged = await client.post("/v1/sessions", json={})
        assert forged.status_code == 401, "a cookie alone must not authorise a write"
        made = await client.post("/v1/sessions", json={}, headers={"X-Keel-Console": "1"})
        assert made.status_code == 201
        assert (await client.get(f"/v1/sessions/{made.json()['id']}")).status_code == 200
        cross = await client.post(
            "/console/login", data={"key": api.key}, headers={"Origin": "https://evil.example"}
        )
        assert cross.status_code == 403
        page = await client.get("/console/sessions")
        assert "default-src 'none'" in page.headers["content-security-policy"]


def _cookie(response: httpx.Response, name: str = "keel_console") -> str:
    value = response.cookies.get(name)
    assert value, response.headers.get("set-cookie")
    return value


async def test_the_console_cookie_is_a_sign_in_token_never_the_api_key(database_dsn: str) -> None:
    async with serve_api(database_dsn) as api, httpx.AsyncClient(base_url=api.url) as client:
        token = _cookie(await client.post("/console/login", data={"key": api.key}))
        assert token != api.key
        assert api.key not in token
        async with httpx.AsyncClient(
            base_url=api.url, cookies={"keel_console": api.key}
        ) as planted:
            assert (await planted.get("/v1/sessions")).status_code == 401
            page = await planted.get("/console/sessions")
            assert (page.status_code, page.headers["location"]) == (303, "/console/login")


async def test_signing_out_ends_the_sign_in_wherever_its_cookie_was_copied(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    async with serve_api(database_dsn) as api, httpx.AsyncClient(base_url=api.url) as client:
        token = _cookie(await client.post("/console/login", data={"key": api.key}))
        async with httpx.AsyncClient(base_url=api.url, cookies={"keel_console": token}) as copy:
            assert (await copy.get("/v1/sessions")).status_code == 200
            cross = await client.post("/console/logout", headers={"Origin": "https://evil.example"})
            assert cross.status_code == 403
            assert (await copy.get("/v1/sessions")).status_code == 200, (
                "a cross-site post ends nothing"
            )
            out = await client.post("/console/logout")
            assert (out.status_code, out.headers["location"]) == (303, "/console/login?signedOut=1")
            assert (await copy.get("/v1/sessions")).status_code == 401
        again = _cookie(await client.post("/console/login", data={"key": api.key}))
        async with httpx.AsyncClient(base_url=api.url, cookies={"keel_console": again}) as fresh:
            assert (await fresh.get("/v1/sessions")).status_code == 200
            key_id = await pool.fetchval("SELECT key_id FROM api_keys WHERE tenant_id = 'acme'")
            await PostgresKeyStore(pool).revoke(key_id)
            assert (await fresh.get("/v1/sessions")).status_code == 401, "a revoked key ends it"


async def test_failed_sign_ins_are_throttled_per_address(database_dsn: str) -> None:
    async with serve_api(database_dsn) as api, httpx.AsyncClient(base_url=api.url) as client:
        codes = [
            (await client.post("/console/login", data={"key": f"wrong-{i}"})).status_code
            for i in range(60)
        ]
        assert codes[:10] == [401] * 10
        assert set(codes[10:]) == {429}
        throttled = await client.post("/console/login", data={"key": api.key})
        assert throttled.status_code == 429
        assert 1 <= int(throttled.headers["retry-after"]) <= 60


async def test_over_https_the_cookie_is_host_prefixed_and_secure(database_dsn: str) -> None:
    async with serve_api(database_dsn) as api, httpx.AsyncClient(base_url=api.url) as client:
        proxied = {"X-Forwarded-Proto": "https"}  # uvicorn trusts it from 127.0.0.1
        signed = await client.post("/console/login", data={"key": api.key}, headers=proxied)
        assert signed.status_code == 303, signed.text
        cookie = signed.headers["set-cookie"]
        assert cookie.startswith("__Host-keel_console=")
        assert "secure" in cookie.lower()
        assert "path=/" in cookie.lower()
        assert "domain=" not in cookie.lower()
        token = cookie.split(";", 1)[0].split("=", 1)[1]
        as_https = {**proxied, "Cookie": f"__Host-keel_console={token}"}
        assert (await client.get("/v1/sessions", headers=as_https)).status_code == 200
        plain = {**proxied, "Cookie": f"keel_console={token}"}
        assert (await client.get("/v1/sessions", headers=plain)).status_code == 401
