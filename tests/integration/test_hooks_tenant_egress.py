"""The hooks allowlist is the tenant's (issue 26.9): a non-public receiver is reached only when
the operator allows it (KEEL_HOOKS_ALLOWED_HOSTS) and the tenant's own document lists it too,
checked at subscribe and at every attempt; and what a non-public receiver answers is never
shown to the tenant."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from keel_stream.hooks.sender import NOT_RECORDED
from keel_stream.kafka.broker import free_port
from keel_stream.store import PostgresLedger, create_pool
from keel_stream.store.keys import PostgresKeyStore
from tests.support.api import Api, serve_api
from tests.support.hook_receiver import (
    LOOPBACK_RECEIVERS,
    HookReceiver,
    fast_config,
    hooks_task,
    tenant_document,
)
from tests.support.ledger import converse
from tests.support.wait import wait_until

INTERNAL_REPLY = "db=postgres://admin:hunter2@10.0.0.5/prod stack trace"


@contextlib.asynccontextmanager
async def operator_allows_loopback(dsn: str) -> AsyncIterator[Api]:
    """The API with 127.0.0.1 on the operator's allowlist; tenant acme's session s1 had a turn."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KEEL_HOOKS_ALLOWED_HOSTS", "127.0.0.1")
        async with serve_api(dsn) as api:
            pool = await create_pool(dsn, max_size=2)
            try:
                ledger = PostgresLedger(pool)
                await ledger.create_session("acme", "s1")
                await converse(ledger, pool, "s1", 1)
            finally:
                await pool.close()
            yield api


async def _other_key(dsn: str) -> str:
    pool = await create_pool(dsn, max_size=1)
    try:
        await PostgresLedger(pool).create_tenant("other")
        _, key = await PostgresKeyStore(pool).create("other")
        return key
    finally:
        await pool.close()


async def _subscribe(client: httpx.AsyncClient, url: str) -> httpx.Response:
    return await client.post("/v1/hooks", json={"url": url, "events": ["turn.started"]})


async def _rows(client: httpx.AsyncClient, hook_id: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = (await client.get(f"/v1/hooks/{hook_id}/deliveries")).json()[
        "deliveries"
    ]
    return rows


async def test_a_tenant_reaches_only_the_operators_non_public_hosts_its_document_lists(
    database_dsn: str,
) -> None:
    receiver = await HookReceiver().start()
    try:
        async with operator_allows_loopback(database_dsn) as api, api.client() as acme:
            other_key = await _other_key(database_dsn)
            async with api.client(other_key) as other:
                refused = await _subscribe(other, receiver.url)  # other has no document
                assert refused.status_code == 400, refused.text
                assert refused.json()["error"]["code"] == "hook_url_refused"
                assert "hooks.allowedHosts" in refused.json()["error"]["message"]
                await tenant_document(
                    database_dsn, "other", {"hooks": {"allowedHosts": ["10.0.0.0/8"]}}
                )
                assert (await _subscribe(other, receiver.url)).status_code == 400
            await tenant_document(database_dsn, "acme", LOOPBACK_RECEIVERS)
            created = await _subscribe(acme, receiver.url)
            assert created.status_code == 201, created.text
            hook = created.json()
            receiver.secrets.append(hook["secret"])
            # The tenant takes the host off its list: the next attempt is refused.
            await tenant_document(database_dsn, "acme", {})
            await acme.post(f"/v1/hooks/{hook['id']}/replay", json={"session": "s1", "fromSeq": 2})
            async with hooks_task(fast_config(database_dsn, None, "")):

                async def dead() -> bool:
                    return [r["status"] for r in await _rows(acme, hook["id"])] == ["dead"]

                await wait_until(dead, 30, "the attempt to be refused by the tenant's list")
            (row,) = await _rows(acme, hook["id"])
            assert str(row["lastError"]).startswith("hook_url_refused")
        assert receiver.accepted == []
    finally:
        await receiver.stop()


async def test_a_non_public_receivers_reply_is_never_shown_to_the_tenant(
    database_dsn: str,
) -> None:
    receiver = await HookReceiver(answer=422, answer_body=INTERNAL_REPLY).start()
    try:
        async with (
            operator_allows_loopback(database_dsn) as api,
            api.client() as client,
            hooks_task(fast_config(database_dsn, None, "")),
        ):
            await tenant_document(database_dsn, "acme", LOOPBACK_RECEIVERS)
            hook = (await _subscribe(client, receiver.url)).json()
            receiver.secrets.append(hook["secret"])
            await client.post(
                f"/v1/hooks/{hook['id']}/replay", json={"session": "s1", "fromSeq": 2}
            )

            async def dead() -> bool:
                return [r["status"] for r in await _rows(client, hook["id"])] == ["dead"]

            await wait_until(dead, 30, "the 422 to dead-letter the delivery")
            (row,) = await _rows(client, hook["id"])
            detail = (await client.get(f"/v1/hooks/{hook['id']}/deliveries/{row['id']}")).json()
        assert len(receiver.accepted) == 1, "the receiver did answer, with its body"
        (attempt,) = detail["attemptLog"]
        assert (row["lastStatus"], attempt["status"]) == (422, 422)
        for error in (row["lastError"], detail["lastError"], attempt["error"]):
            assert error.startswith("HTTP 422"), error
            assert "hunter2" not in error, error
            assert "stack trace" not in error, error
    finally:
        await receiver.stop()


async def test_a_non_public_receivers_connection_error_text_is_never_shown(
    database_dsn: str,
) -> None:
    closed = f"http://127.0.0.1:{free_port()}/hooks"  # nothing listens there
    async with (
        operator_allows_loopback(database_dsn) as api,
        api.client() as client,
        hooks_task(fast_config(database_dsn, None, "")),
    ):
        await tenant_document(database_dsn, "acme", LOOPBACK_RECEIVERS)
        hook = (await _subscribe(client, closed)).json()
        replay = {"session": "s1", "fromSeq": 2}
        await client.post(f"/v1/hooks/{hook['id']}/replay", json=replay)

        async def attempted() -> bool:
            return any(r["attempts"] >= 1 for r in await _rows(client, hook["id"]))

        await wait_until(attempted, 30, "a failed attempt")
        (row,) = await _rows(client, hook["id"])
    assert row["lastStatus"] is None
    assert row["lastError"] == f"ConnectError {NOT_RECORDED}", row["lastError"]
