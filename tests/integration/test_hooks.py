"""Hooks end to end with real PostgreSQL, a real broker and a receiver that verifies every
request with the Standard Webhooks library: every hook event delivered at least once with a
stable id, a receiver down for 15 s (retried with a capped backoff) gets everything afterwards,
and a replay from seq 1 sends the same ids again."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import asyncpg
import httpx
import pytest

from keel_stream.hooks import HOOK_NAMES
from keel_stream.hooks.envelope import webhook_id
from keel_stream.kernel import CommitRequest, LeaseToken
from keel_stream.kernel.canonical import canonical_json
from keel_stream.relay import RelayConfig
from keel_stream.store import PostgresLedger, create_pool
from tests.support.api import serve_api
from tests.support.hook_receiver import (
    LOOPBACK_RECEIVERS,
    Expected,
    HookReceiver,
    conversed,
    fast_config,
    hooks_task,
    tenant_document,
)
from tests.support.kafka import KafkaServer
from tests.support.ledger import converse, grant_lease
from tests.support.relays import relay_task
from tests.support.wait import wait_until

OUTAGE_S = 15.0
"""Several capped backoffs of fast_config (0.5 s doubling up to 2 s), so every event is retried."""


async def gated_turn(ledger: PostgresLedger, pool: asyncpg.Pool, session: str) -> Expected:
    """An input, an answer whose call needs approval, the decision, its result, the answer."""
    lease = LeaseToken(owner="worker", epoch=1)
    await grant_lease(pool, "acme", session, lease)
    digest = "sha256:" + hashlib.sha256(canonical_json({})).hexdigest()
    approval = {
        "decisionId": "call_g",
        "argsDigest": digest,
        "outcomes": ["approve", "edit", "reject", "respond"],
        "expiresAt": "2026-12-05T10:00:00Z",
        "onExpire": "reject",
    }
    call = {"type": "toolCall", "id": "call_g", "name": "shell", "arguments": {}}
    answer = {"id": "call_g", "outcome": "approve", "argsDigest": digest, "answeredBy": "ops"}
    requests: list[tuple[str, dict[str, Any], str | None, LeaseToken | None]] = [
        ("user.message", {"text": "rm -rf?"}, "q", None),
        (
            "assistant.message",
            {"content": [{**call, "approval": approval}], "stopReason": "tool_use"},
            "g1",
            lease,
        ),
        ("user.message", {"requestId": "decision:call_g", "decision": answer}, None, None),
        ("tool.result", {"toolCallId": "call_g", "content": []}, None, lease),
        ("assistant.message", {"content": [], "stopReason": "end_turn"}, "g2", lease),
    ]
    for kind, payload, key, fence in requests:
        await ledger.commit(
            CommitRequest(
                tenant_id="acme",
                session_id=session,
                kind=kind,
                payload=payload,
                key=key if key is not None else payload.get("requestId"),
                lease=fence,
            )
        )
    hooks = [
        ("turn.started", 1, ""),
        ("turn.finished", 2, ""),
        ("decision.opened", 2, "call_g"),
        ("decision.answered", 3, "call_g"),
        ("turn.started", 4, ""),
        ("turn.finished", 5, ""),
    ]
    return {webhook_id("acme", session, s, h, d): (h, session, s) for h, s, d in hooks}


@dataclass
class Platform:
    ledger: PostgresLedger
    pool: asyncpg.Pool
    client: httpx.AsyncClient
    receiver: HookReceiver
    hook_id: str


@pytest.fixture
async def platform(
    database_dsn: str, kafka: KafkaServer, topic_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Platform]:
    """The API, a relay and the hooks process, and a subscription to every hook event."""
    monkeypatch.setenv("KEEL_HOOKS_ALLOWED_HOSTS", "127.0.0.1")
    receiver = await HookReceiver().start()
    pool = await create_pool(database_dsn, max_size=4)
    ledger = PostgresLedger(pool)
    relay = RelayConfig(database_dsn, kafka.settings, topic_prefix, poll_interval_s=0.2)
    try:
        async with serve_api(database_dsn) as api, api.client() as client:
            await tenant_document(database_dsn, "acme", LOOPBACK_RECEIVERS)
            created = await client.post(
                "/v1/hooks", json={"url": receiver.url, "events": list(HOOK_NAMES)}
            )
            assert created.status_code == 201, created.text
            receiver.secrets.append(created.json()["secret"])
            config = fast_config(database_dsn, kafka.bootstrap, topic_prefix)
            async with relay_task(relay), hooks_task(config):
                yield Platform(ledger, pool, client, receiver, created.json()["id"])
    finally:
        await receiver.stop()
        await pool.close()


async def _deliveries(client: httpx.AsyncClient, hook_id: str) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    cursor = None
    while True:
        params = {"limit": 200, **({"cursor": cursor} if cursor else {})}
        page = (await client.get(f"/v1/hooks/{hook_id}/deliveries", params=params)).json()
        found.extend(page["deliveries"])
        cursor = page["nextCursor"]
        if cursor is None:
            return found


async def test_every_hook_event_is_delivered_with_a_stable_id_and_replayed_with_it(
    platform: Platform,
) -> None:
    ledger, pool, receiver = platform.ledger, platform.pool, platform.receiver
    for session in ("s1", "s2", "s3"):
        await ledger.create_session("acme", session)
    await converse(ledger, pool, "s1", 2)
    await converse(ledger, pool, "s2", 1)
    expected = conversed("s1", 2) | conversed("s2", 1) | await gated_turn(ledger, pool, "s3")

    async def all_received() -> bool:
        return set(receiver.counts()) >= set(expected)

    await wait_until(all_received, 60, "every hook event at the receiver")
    assert set(receiver.counts()) == set(expected), "nothing but the derived hook events"
    assert receiver.refused == []
    for received in receiver.accepted:
        hook, session, seq = expected[received.webhook_id]
        assert (received.type, received.data["session"], received.data["seq"]) == (
            hook,
            session,
            seq,
        )
        assert received.data["tenant"] == "acme"
    opened = [r for r in receiver.accepted if r.type == "decision.opened"]
    assert opened[0].data["decisionId"] == "call_g"
    assert opened[0].data["outcomes"] == ["approve", "edit", "reject", "respond"]

    async def all_marked() -> bool:
        rows = await _deliveries(platform.client, platform.hook_id)
        return len(rows) == len(expected) and all(r["status"] == "delivered" for r in rows)

    await wait_until(all_marked, 30, "every delivery marked delivered")

    replayed = await platform.client.post(
        f"/v1/hooks/{platform.hook_id}/replay", json={"fromSeq": 1}
    )
    assert replayed.status_code == 202, replayed.text
    assert replayed.json()["queued"] == len(expected)

    async def all_twice() -> bool:
        return all(receiver.counts()[i] >= 2 for i in expected)

    await wait_until(all_twice, 60, "the replay to deliver every hook event again")
    assert set(receiver.counts()) == set(expected), "the replay used the same webhook ids"
    assert receiver.refused == []


async def test_a_receiver_down_through_retries_gets_everything_after(platform: Platform) -> None:
    ledger, pool, receiver = platform.ledger, platform.pool, platform.receiver
    await ledger.create_session("acme", "s1")
    await converse(ledger, pool, "s1", 1)
    before = conversed("s1", 1)

    async def first_received() -> bool:
        return set(receiver.counts()) >= set(before)

    await wait_until(first_received, 60, "the first turn's hook events")
    await receiver.stop()
    loop = asyncio.get_running_loop()
    down_at = loop.time()
    await converse(ledger, pool, "s1", 2, start=1)
    during = conversed("s1", 2, start=1)

    async def outage_seen() -> bool:
        """OUTAGE_S down, and every hook event of the outage tried and failed more than once."""
        rows = await _deliveries(platform.client, platform.hook_id)
        failing = [r for r in rows if r["webhookId"] in during]
        retried = len(failing) == len(during) and all(
            r["status"] == "pending" and int(str(r["attempts"])) >= 2 for r in failing
        )
        return retried and loop.time() - down_at >= OUTAGE_S

    await wait_until(outage_seen, OUTAGE_S + 30, "an outage with every attempt failing", 0.5)
    await receiver.start()

    async def all_received() -> bool:
        return set(receiver.counts()) >= set(before) | set(during)

    await wait_until(all_received, 30, "every hook event once the receiver is back")
    assert set(receiver.counts()) == set(before) | set(during)
    assert receiver.refused == []

    async def all_marked() -> bool:
        rows = await _deliveries(platform.client, platform.hook_id)
        return all(r["status"] == "delivered" for r in rows)

    await wait_until(all_marked, 30, "every delivery marked delivered")
    rows = {str(r["webhookId"]): r for r in await _deliveries(platform.client, platform.hook_id)}
    assert all(int(str(rows[i]["attempts"])) >= 2 for i in during)
    one = rows[next(iter(during))]
    detail = await platform.client.get(f"/v1/hooks/{platform.hook_id}/deliveries/{one['id']}")
    log = detail.json()["attemptLog"]
    assert [a["status"] for a in log][-1] == 204
    assert all(a["status"] is None and a["error"] for a in log[:-1]), "connection refused"
