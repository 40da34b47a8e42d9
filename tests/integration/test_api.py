"""AgentAPI over HTTP against the real app, PostgreSQL and (where it matters) a broker."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

import keel_stream.store
from keel_stream.kafka.admin import apply_catalog
from keel_stream.kafka.broker import EmbeddedBroker
from keel_stream.kafka.settings import KafkaSettings
from keel_stream.kernel import CommitRequest
from keel_stream.store import ExternalMarkers, PostgresLedger
from keel_stream.store.keys import PostgresKeyStore
from tests.support.api import Api, SseFrame, read_frames, serve_api
from tests.support.kafka import KafkaServer
from tests.support.postgres import unique_name
from tests.support.wait import wait_until


@pytest.fixture
async def api(database_dsn: str, kafka: KafkaServer, topic_prefix: str) -> Any:
    async with serve_api(database_dsn, kafka.bootstrap, topic_prefix) as served:
        yield served


async def session_id(client: httpx.AsyncClient, sid: str | None = None) -> str:
    response = await client.post("/v1/sessions", json={"id": sid} if sid else None)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def error_code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


async def test_capabilities(api: Api) -> None:
    async with api.client() as client:
        body = (await client.get("/v1/capabilities")).json()
    assert body["apiVersion"] == "v1"
    assert body["serviceVersion"].startswith("keel-stream/")
    assert body["features"]["sessions.list"] is True
    for feature in ("decisions", "subagents", "plugins"):
        assert body["features"][feature] is True, feature
    # No hooks sender or trigger scheduler runs here (test_service_presence.py starts them).
    assert (body["features"]["hooks"], body["features"]["triggers"]) == (False, False)
    assert body["hooks"] == [
        "subagent.started",
        "subagent.finished",
        "trigger.before",
        "trigger.after",
        "turn.started",
        "turn.finished",
        "decision.opened",
        "decision.answered",
    ]  # fmt: skip, the seed's list, in its order
    assert body["limits"]["sessionsPageDefault"] == 50
    assert body["limits"]["sessionsPageMax"] == 200
    assert body["limits"]["subagentsPageMax"] == 200


async def test_missing_bad_and_revoked_keys_are_401(api: Api, pool: asyncpg.Pool) -> None:
    async with httpx.AsyncClient(base_url=api.url) as anonymous:
        response = await anonymous.get("/v1/sessions")
        assert (response.status_code, error_code(response)) == (401, "unauthorized")
    async with api.client("not-a-key") as client:
        assert (await client.get("/v1/sessions")).status_code == 401
    key_id, key = await PostgresKeyStore(pool).create("acme")
    async with api.client(key) as client:
        assert (await client.get("/v1/sessions")).status_code == 200
        await PostgresKeyStore(pool).revoke(key_id)
        assert (await client.get("/v1/sessions")).status_code == 401


async def test_sessions_create_get_list_and_page(api: Api) -> None:
    async with api.client() as client:
        ids = sorted(
            [await session_id(client) for _ in range(4)] + [await session_id(client, "a1")]
        )
        again = await client.post("/v1/sessions", json={"id": "a1"})
        assert (again.status_code, error_code(again)) == (409, "session_exists")
        got = (await client.get("/v1/sessions/a1")).json()
        assert (got["id"], got["lastSeq"], got["stateOwner"]) == ("a1", 0, "keel")
        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 2}
            if cursor:
                params["cursor"] = cursor
            page = (await client.get("/v1/sessions", params=params)).json()
            seen += [s["id"] for s in page["sessions"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert seen == ids
        too_big = await client.get("/v1/sessions", params={"limit": 201})
        assert (too_big.status_code, error_code(too_big)) == (400, "invalid_request")
        missing = await client.get("/v1/sessions/nope")
        assert (missing.status_code, error_code(missing)) == (404, "session_not_found")
        bad = await client.get("/v1/sessions/bad%20id")
        assert (bad.status_code, error_code(bad)) == (400, "invalid_identifier")


async def test_a_listed_session_looks_as_it_does_on_its_own(api: Api) -> None:
    async with api.client() as client:
        await client.post("/v1/sessions", json={"id": "s9"})
        await client.post("/v1/sessions/s9/input", json={"text": "hi"})
        got = (await client.get("/v1/sessions/s9")).json()
        listed = (await client.get("/v1/sessions")).json()["sessions"]
    assert got["run"]["attempts"] is not None, "an input made the session owe a run"
    assert [s for s in listed if s["id"] == "s9"] == [got]


async def test_openapi_declares_the_bearer_scheme(api: Api) -> None:
    async with api.client() as client:
        schema = (await client.get("/openapi.json")).json()
    schemes = schema["components"]["securitySchemes"]
    assert any(s.get("scheme") == "bearer" for s in schemes.values())
    list_sessions = schema["paths"]["/v1/sessions"]["get"]
    assert list_sessions["security"], "the session routes require the key"


async def test_other_tenants_session_is_404(
    api: Api, pool: asyncpg.Pool, ledger: PostgresLedger
) -> None:
    await ledger.create_tenant("globex")
    await ledger.create_session("globex", "theirs")
    async with api.client() as client:
        for response in (
            await client.get("/v1/sessions/theirs"),
            await client.post("/v1/sessions/theirs/input", json={"text": "x"}),
            await client.get("/v1/sessions/theirs/events"),
        ):
            assert (response.status_code, error_code(response)) == (404, "session_not_found")


async def test_input_is_idempotent_by_request_id(api: Api) -> None:
    async with api.client() as client:
        sid = await session_id(client)
        body = {"text": "hello keel", "requestId": "9e5088a0"}
        first = await client.post(f"/v1/sessions/{sid}/input", json=body)
        assert first.status_code == 201
        assert first.json()["created"] is True
        assert (first.json()["requestId"], first.json()["seq"]) == ("9e5088a0", 1)
        retry = await client.post(f"/v1/sessions/{sid}/input", json=body)
        assert retry.status_code == 200
        assert (retry.json()["created"], retry.json()["seq"]) == (False, 1)
        conflict = await client.post(
            f"/v1/sessions/{sid}/input", json={"text": "other", "requestId": "9e5088a0"}
        )
        assert (conflict.status_code, error_code(conflict)) == (409, "idempotency_conflict")
        generated = await client.post(f"/v1/sessions/{sid}/input", json={"text": "no id"})
        assert generated.json()["requestId"]
        degraded = await client.post(
            f"/v1/sessions/{sid}/input", json={"text": "now", "delivery": "guide"}
        )
        assert degraded.json()["delivery"] == "queue", "no active attempt: guide degrades"
        for bad, code in (
            ({"delivery": "later"}, "delivery_invalid"),
            ({"text": 5}, "text_not_string"),
            ({"requestId": ""}, "invalid_identifier"),
        ):
            response = await client.post(f"/v1/sessions/{sid}/input", json=bad)
            assert (response.status_code, error_code(response)) == (400, code)
        not_json = await client.post(
            f"/v1/sessions/{sid}/input",
            content=b"{oops",
            headers={"content-type": "application/json"},
        )
        assert not_json.status_code == 400
        events = (await client.get(f"/v1/sessions/{sid}/events")).json()["events"]
        assert [e["seq"] for e in events] == [1, 2, 3]


async def test_edge_events_and_paging(api: Api) -> None:
    async with api.client() as client:
        sid = await session_id(client)
        ok = await client.post(
            f"/v1/sessions/{sid}/events", json={"kind": "user.message", "payload": {"text": "a"}}
        )
        assert ok.status_code == 201
        for kind, code in (("assistant.message", "kind_not_allowed"), ("nope", "unknown_kind")):
            response = await client.post(f"/v1/sessions/{sid}/events", json={"kind": kind})
            assert (response.status_code, error_code(response)) == (400, code)
        bad_payload = await client.post(
            f"/v1/sessions/{sid}/events",
            json={"kind": "user.message", "payload": {"retryOf": -1}},
        )
        assert (bad_payload.status_code, error_code(bad_payload)) == (400, "retry_of_invalid")
        for i in range(4):
            await client.post(f"/v1/sessions/{sid}/input", json={"text": str(i)})
        page = (await client.get(f"/v1/sessions/{sid}/events", params={"limit": 2})).json()
        assert ([e["seq"] for e in page["events"]], page["nextCursor"]) == ([1, 2], 2)
        rest = (
            await client.get(f"/v1/sessions/{sid}/events", params={"after": 2, "limit": 10})
        ).json()
        assert ([e["seq"] for e in rest["events"]], rest["nextCursor"]) == ([3, 4, 5], None)
        bad = await client.get(f"/v1/sessions/{sid}/events", params={"limit": 0})
        assert bad.status_code == 400


async def test_run_and_cancel(api: Api, ledger: PostgresLedger) -> None:
    await ledger.create_session("acme", "ext", external=ExternalMarkers(backend="dsh", ref="r"))
    async with api.client() as client:
        sid = await session_id(client)
        idle = await client.post(f"/v1/sessions/{sid}/run")
        assert (idle.status_code, idle.json()) == (
            200,
            {"queued": False, "reason": "nothing_owed", "status": None},
        )
        await client.post(f"/v1/sessions/{sid}/input", json={"text": "x"})
        queued = await client.post(f"/v1/sessions/{sid}/run")
        assert (queued.status_code, queued.json()) == (
            202,
            {"queued": True, "reason": None, "status": "pending"},
        )
        refused = await client.post("/v1/sessions/ext/run")
        assert (refused.status_code, error_code(refused)) == (409, "external_session")
        # Input to an external session goes to its backend; "dsh" is declared nowhere here.
        edge = await client.post("/v1/sessions/ext/input", json={"text": "x"})
        assert (edge.status_code, error_code(edge)) == (409, "external_session_unavailable")
        cancel = await client.post(f"/v1/sessions/{sid}/cancel")
        assert (cancel.status_code, error_code(cancel)) == (409, "no_running_attempt")


async def test_read_models_with_min_seq(api: Api) -> None:
    async with api.client() as client:
        sid = await session_id(client)
        empty = await client.get(f"/v1/sessions/{sid}/transcript")
        assert (empty.status_code, empty.json()["lastSeq"]) == (200, 0)
        await client.post(f"/v1/sessions/{sid}/input", json={"text": "x"})
        behind = await client.get(
            f"/v1/sessions/{sid}/status", params={"min_seq": 1, "wait_s": 0.2}
        )
        assert (behind.status_code, error_code(behind)) == (503, "projection_behind")
        assert behind.headers["Retry-After"] == "1"


async def test_health_ready_metrics(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url) as client:
        assert (await client.get("/healthz")).json() == {"status": "ok"}
        # No projections worker runs here: the database is ready, the read models are not.
        ready = await client.get("/readyz")
        body = ready.json()
        assert (ready.status_code, body["error"]["code"]) == (503, "projection_behind")
        database = body["dependencies"]["database"]
        assert (database["ok"], database["schemaVersion"]) == (True, _latest_migration())
        metrics = await client.get("/metrics")
        assert "keel_api_sse_streams" in metrics.text
        assert (await client.get("/openapi.json")).json()["info"]["title"]


def _latest_migration() -> int:
    migrations = Path(keel_stream.store.__file__).parent / "sql" / "migrations"
    return max(int(p.name.split("_", 1)[0]) for p in migrations.glob("*.sql"))


async def collect_frames(frames: AsyncIterator[SseFrame], count: int) -> list[SseFrame]:
    return [await anext(frames) for _ in range(count)]


async def test_sse_resume_with_last_event_id_is_exactly_once_in_order(
    api: Api, ledger: PostgresLedger
) -> None:
    async with api.client() as client:
        sid = await session_id(client)

        async def say(n: int) -> None:
            await ledger.commit(
                CommitRequest(
                    tenant_id="acme", session_id=sid, kind="user.message", payload={"n": n}
                )
            )

        for n in range(3):
            await say(n)
        received: list[int] = []
        async with client.stream("GET", f"/v1/sessions/{sid}/events/stream") as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            first = await asyncio.wait_for(collect_frames(read_frames(response), 2), 10)
        received += [int(f.id or 0) for f in first]
        for n in range(3, 6):
            await say(n)
        headers = {"Last-Event-ID": str(received[-1])}
        async with client.stream(
            "GET", f"/v1/sessions/{sid}/events/stream", headers=headers
        ) as response:
            frames = read_frames(response)
            rest = await asyncio.wait_for(collect_frames(frames, 4), 10)
            live_task = asyncio.create_task(collect_frames(frames, 2))
            await say(6)
            await say(7)
            live = await asyncio.wait_for(live_task, 10)
        received += [int(f.id or 0) for f in rest + live]
    assert received == list(range(1, 9))
    assert all(f.event == "user.message" for f in first + rest + live)
    assert live[0].json()["payload"] == {"n": 6}


async def test_sse_keeps_flowing_when_kafka_is_unreachable(database_dsn: str) -> None:
    async with serve_api(database_dsn, bootstrap="127.0.0.1:1") as api, api.client() as client:
        sid = await session_id(client)
        async with client.stream("GET", f"/v1/sessions/{sid}/events/stream?after=0") as stream:
            reading = asyncio.create_task(collect_frames(read_frames(stream), 2))
            for text in ("one", "two"):
                await client.post(f"/v1/sessions/{sid}/input", json={"text": text})
            frames = await asyncio.wait_for(reading, 15)
    assert [f.id for f in frames] == ["1", "2"]


async def test_sse_keeps_flowing_after_the_broker_stops(database_dsn: str) -> None:
    broker = EmbeddedBroker()
    broker.start()
    prefix = f"{unique_name('t')}."
    try:
        await apply_catalog(KafkaSettings(broker.bootstrap), prefix)
        async with serve_api(database_dsn, broker.bootstrap, prefix) as api, api.client() as client:

            async def kafka_live() -> bool:
                readyz = (await client.get("/readyz")).json()
                return bool(readyz["dependencies"]["kafka"]["liveSource"])

            async def kafka_gone() -> bool:
                return (await client.get("/readyz")).json()["kafka"] is False

            await wait_until(kafka_live, 30, "the api's live Kafka source")
            sid = await session_id(client)
            async with client.stream("GET", f"/v1/sessions/{sid}/events/stream") as stream:
                frames = read_frames(stream)
                await client.post(f"/v1/sessions/{sid}/input", json={"text": "before"})
                before = await asyncio.wait_for(anext(frames), 15)
                broker.stop()
                for text in ("after one", "after two"):
                    await client.post(f"/v1/sessions/{sid}/input", json={"text": text})
                after = await asyncio.wait_for(collect_frames(frames, 2), 15)
            await wait_until(kafka_gone, 15, "/readyz to say the broker does not answer")
    finally:
        broker.stop()
    assert [before.id] + [f.id for f in after] == ["1", "2", "3"]
    payload = after[-1].json()["payload"]
    assert isinstance(payload, dict)
    assert payload["text"] == "after two"


async def test_unauthenticated_stream_is_401(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url) as client:
        response = await client.get("/v1/sessions/x/events/stream")
    assert response.status_code == 401


async def test_out_of_range_cursors_are_400_not_500(api: Api) -> None:
    async with api.client() as client:
        sid = await session_id(client)
        for response in (
            await client.get(
                f"/v1/sessions/{sid}/events/stream",
                headers={b"Last-Event-ID": "\u00b2".encode("latin-1")},
            ),
            await client.get(
                f"/v1/sessions/{sid}/events/stream", headers={"Last-Event-ID": "9" * 30}
            ),
            await client.get(f"/v1/sessions/{sid}/events", params={"after": 2**63}),
            await client.get("/v1/sessions", params={"cursor": "a\u0000b"}),
            await client.post(f"/v1/sessions/{sid}/input", json={"text": "x", "meta": _deep(900)}),
        ):
            assert response.status_code == 400, response.text


def _deep(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"x": value}
    return value
