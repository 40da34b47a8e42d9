"""/v1/hooks against real PostgreSQL: subscriptions and their limits, the SSRF policy at
subscribe and at send time, 410 and 4xx answers, redelivery, rotation and the deliveries log.
Deliveries are queued by replays from the ledger (no broker needed)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace

import httpx
import pytest

from keel_stream.errors import SessionExists
from keel_stream.hooks.egress import EgressPolicy
from keel_stream.hooks.envelope import webhook_id
from keel_stream.hooks.service import HooksConfig
from keel_stream.store import PostgresLedger, create_pool
from keel_stream.store.keys import PostgresKeyStore
from tests.support.api import Api, serve_api
from tests.support.hook_receiver import HookReceiver, fast_config, hooks_task, tenant_document
from tests.support.ledger import converse
from tests.support.wait import wait_until


@contextlib.asynccontextmanager
async def api_with_sessions(dsn: str, allowed: str | None) -> AsyncIterator[Api]:
    """The API (allowing `allowed` when given) over a tenant whose session s1 had one turn."""
    with pytest.MonkeyPatch.context() as patch:
        if allowed is None:
            patch.delenv("KEEL_HOOKS_ALLOWED_HOSTS", raising=False)
        else:
            patch.setenv("KEEL_HOOKS_ALLOWED_HOSTS", allowed)
        async with serve_api(dsn) as api:
            pool = await create_pool(dsn, max_size=2)
            try:
                ledger = PostgresLedger(pool)
                try:
                    await ledger.create_session("acme", "s1")
                except SessionExists:
                    pass  # an earlier block of the same test made it, with its turn
                else:
                    await converse(ledger, pool, "s1", 1)
            finally:
                await pool.close()
            if allowed is not None:  # the tenant's own list narrows the operator's
                await tenant_document(dsn, "acme", {"hooks": {"allowedHosts": allowed.split(",")}})
            yield api


async def _subscribe(client: httpx.AsyncClient, url: str, **extra: object) -> dict[str, str]:
    created = await client.post("/v1/hooks", json={"url": url, "events": ["turn.started"], **extra})
    assert created.status_code == 201, created.text
    body: dict[str, str] = created.json()
    return body


async def _deliveries(client: httpx.AsyncClient, hook_id: str) -> list[dict[str, object]]:
    page = await client.get(f"/v1/hooks/{hook_id}/deliveries")
    assert page.status_code == 200, page.text
    rows: list[dict[str, object]] = page.json()["deliveries"]
    return rows


async def test_a_private_address_url_is_refused(database_dsn: str) -> None:
    receiver = await HookReceiver().start()
    try:
        async with api_with_sessions(database_dsn, None) as api, api.client() as client:
            for url in (
                receiver.url,  # 127.0.0.1: loopback, and not allowed here
                "http://localhost:8080/in",
                "http://10.0.0.7/in",
                "http://192.168.1.20/in",
                "http://169.254.169.254/latest/meta-data/",
                "http://[::1]:9000/in",
                "http://[fd00::5]/in",
                "ftp://example.com/in",
            ):
                body = {"url": url, "events": ["turn.started"]}
                refused = await client.post("/v1/hooks", json=body)
                assert refused.status_code == 400, url
                assert refused.json()["error"]["code"] == "hook_url_refused", url
            assert (await client.get("/v1/hooks")).json()["hooks"] == []
        # Allowed when subscribing, refused when sending: the check is made again per attempt.
        async with api_with_sessions(database_dsn, "127.0.0.1") as api, api.client() as client:
            hook = await _subscribe(client, receiver.url)
            receiver.secrets.append(hook["secret"])
            replayed = await client.post(f"/v1/hooks/{hook['id']}/replay", json={"fromSeq": 2})
            assert replayed.json() == {"queued": 1, "sessions": 1, "events": 5}
            strict = replace(fast_config(database_dsn, None, ""), policy=EgressPolicy())
            async with hooks_task(strict):

                async def dead() -> bool:
                    rows = await _deliveries(client, hook["id"])
                    return [r["status"] for r in rows] == ["dead"]

                await wait_until(dead, 30, "the delivery to be refused at send time")
            (row,) = await _deliveries(client, hook["id"])
            assert str(row["lastError"]).startswith("hook_url_refused")
            assert row["attempts"] == 1
        assert receiver.accepted == []
        assert receiver.refused == []
    finally:
        await receiver.stop()


async def test_subscriptions_are_the_tenants_own_and_bounded(database_dsn: str) -> None:
    async with api_with_sessions(database_dsn, "127.0.0.1") as api, api.client() as client:
        bad = [
            ({"url": "http://127.0.0.1/", "events": ["turn.sideways"]}, "invalid_hook"),
            ({"url": "http://127.0.0.1/", "events": []}, "invalid_request"),
            ({"url": "http://127.0.0.1/" + "x" * 2100, "events": ["turn.started"]}, None),
            (
                {"url": "http://127.0.0.1/", "events": ["turn.started"], "sessionFilter": {}},
                "invalid_hook",
            ),
        ]
        for body, code in bad:
            answer = await client.post("/v1/hooks", json=body)
            assert answer.status_code == 400, body
            assert code is None or answer.json()["error"]["code"] == code
        hook = await _subscribe(
            client, "http://127.0.0.1:9/in", sessionFilter={"ids": ["s1"], "prefix": "s"}
        )
        assert hook["secret"].startswith("whsec_")
        listed = (await client.get("/v1/hooks")).json()["hooks"]
        assert [h["id"] for h in listed] == [hook["id"]]
        assert "secret" not in listed[0]
        assert "secret" not in (await client.get(f"/v1/hooks/{hook['id']}")).json()
        assert listed[0]["sessionFilter"] == {"ids": ["s1"], "prefix": "s"}
        pool = await create_pool(database_dsn, max_size=1)
        try:
            await PostgresLedger(pool).create_tenant("other")
            _, other_key = await PostgresKeyStore(pool).create("other")
        finally:
            await pool.close()
        async with api.client(other_key) as other:
            for method, path in (
                ("GET", f"/v1/hooks/{hook['id']}"),
                ("DELETE", f"/v1/hooks/{hook['id']}"),
                ("POST", f"/v1/hooks/{hook['id']}/rotate"),
                ("POST", f"/v1/hooks/{hook['id']}/replay"),
                ("GET", f"/v1/hooks/{hook['id']}/deliveries"),
            ):
                answer = await other.request(method, path)
                assert answer.status_code == 404, path
                assert answer.json()["error"]["code"] == "hook_not_found"
            assert (await other.get("/v1/hooks")).json()["hooks"] == []
        for _ in range(19):
            await _subscribe(client, "http://127.0.0.1:9/in")
        body = {"url": "http://127.0.0.1:9/in", "events": ["turn.started"]}
        over = await client.post("/v1/hooks", json=body)
        assert over.status_code == 409
        assert over.json()["error"]["code"] == "hook_limit_reached"
        assert (await client.delete(f"/v1/hooks/{hook['id']}")).status_code == 204
        assert (await client.get(f"/v1/hooks/{hook['id']}")).status_code == 404


async def test_gone_disables_4xx_is_dead_at_once_and_redelivery_keeps_the_id(
    database_dsn: str,
) -> None:
    receiver = await HookReceiver().start()
    config: HooksConfig = fast_config(database_dsn, None, "")
    try:
        async with (
            api_with_sessions(database_dsn, "127.0.0.1") as api,
            api.client() as client,
            hooks_task(config),
        ):
            hook = await _subscribe(client, receiver.url)
            receiver.secrets.append(hook["secret"])
            deliveries = f"/v1/hooks/{hook['id']}/deliveries"

            async def status_is(status: str) -> bool:
                return [r["status"] for r in await _deliveries(client, hook["id"])] == [status]

            receiver.answer = 400
            await client.post(
                f"/v1/hooks/{hook['id']}/replay", json={"session": "s1", "fromSeq": 2}
            )
            await wait_until(lambda: status_is("dead"), 30, "a 400 to dead-letter the delivery")
            (row,) = await _deliveries(client, hook["id"])
            assert (row["attempts"], row["lastStatus"]) == (1, 400)
            assert (await client.get(deliveries, params={"status": "delivered"})).json()[
                "deliveries"
            ] == []

            receiver.answer = 204
            again = await client.post(f"{deliveries}/{row['id']}/redeliver")
            assert again.status_code == 202, again.text
            await wait_until(lambda: status_is("delivered"), 30, "the redelivery")
            ids = [r.webhook_id for r in receiver.accepted]
            assert ids == [row["webhookId"]] * 2, "the same webhook-id on every attempt"
            assert row["webhookId"] == webhook_id("acme", "s1", 3, "turn.started")

            old = receiver.secrets[0]
            rotated = (await client.post(f"/v1/hooks/{hook['id']}/rotate")).json()
            assert rotated["secret"] not in (old, None)
            receiver.secrets[:] = [rotated["secret"]]
            await client.post(f"{deliveries}/{row['id']}/redeliver")
            await wait_until(lambda: _count(receiver, 3), 30, "a delivery signed twice")
            assert receiver.accepted[-1].signatures == 2, "old and new secrets during the grace"

            receiver.answer = 410
            await client.post(f"{deliveries}/{row['id']}/redeliver")
            await wait_until(lambda: status_is("dead"), 30, "a 410 to stop the delivery")
            view = (await client.get(f"/v1/hooks/{hook['id']}")).json()
            assert (view["state"], view["disabledReason"]) == ("disabled", "410 Gone")
            refused = await client.post(f"{deliveries}/{row['id']}/redeliver")
            assert refused.status_code == 409
            assert refused.json()["error"]["code"] == "hook_disabled"
            missing = await client.get(f"{deliveries}/999999")
            assert missing.status_code == 404
            assert missing.json()["error"]["code"] == "hook_delivery_not_found"
        assert receiver.refused == []
    finally:
        await receiver.stop()


async def _count(receiver: HookReceiver, n: int) -> bool:
    return len(receiver.accepted) >= n
