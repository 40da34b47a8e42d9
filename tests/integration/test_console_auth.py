"""The console's sign-in over plain HTTP: the cookie, its guard on writes, its headers."""

from __future__ import annotations

import httpx

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
