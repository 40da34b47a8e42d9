"""External sessions through the API, against real PostgreSQL and the reference sidecar over
stdio: open (markers, quota, metering), input delivered and recorded once, backend events
committed as external.event, cancel, close, and failure isolation."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from keel_stream.gateway.process import ProviderProcess
from keel_stream.gateway.smoke_runtime import processes_with
from keel_stream.store.tenant_configs import PostgresTenantConfigs
from tests.support.api import serve_api

DEADLINE_S = 20.0


def _document(*switches: str, quota: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    backend = {
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent", *switches],
        "timeoutMs": 10000,
        **spec,
    }
    return {
        "external": {
            "backends": {"ref": backend},
            "quota": quota or {"unmetered": "deny"},
        }
    }


async def _until(check: Callable[[], Awaitable[Any]], what: str) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_S}s: {what}")
        await asyncio.sleep(0.05)


async def _events(client: httpx.AsyncClient, session: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/sessions/{session}/events", params={"limit": 1000})
    assert response.status_code == 200, response.text
    events: list[dict[str, Any]] = response.json()["events"]
    return events


def _of_type(events: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in events if e["payload"].get("type") == kind]


async def _open(client: httpx.AsyncClient, **body: Any) -> dict[str, Any]:
    response = await client.post("/v1/sessions", json={"backend": "ref", **body})
    assert response.status_code == 201, response.text
    view: dict[str, Any] = response.json()
    return view


async def _finished(client: httpx.AsyncClient, session: str, count: int) -> list[dict[str, Any]]:
    async def check() -> list[dict[str, Any]]:
        done = _of_type(await _events(client, session), "turn.finished")
        return done if len(done) >= count else []

    result: list[dict[str, Any]] = await _until(check, f"{count} finished turns")
    return result


async def test_an_external_session_is_opened_driven_and_closed_through_the_api(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    async with serve_api(database_dsn) as api, api.client() as client:
        await PostgresTenantConfigs(pool).put("acme", _document())
        view = await _open(client)
        external = view["external"]
        assert view["stateOwner"] == "external"
        assert external["backend"] == "ref"
        assert external["status"] == "active"
        assert external["ref"].startswith("ref-")
        assert external["metering"] == "external"
        session = view["id"]

        first = await client.post(
            f"/v1/sessions/{session}/input", json={"text": "hi", "requestId": "r1"}
        )
        assert first.status_code == 201, first.text
        assert first.json()["kind"] == "external.event"
        assert first.json()["turnId"]
        again = await client.post(
            f"/v1/sessions/{session}/input", json={"text": "hi", "requestId": "r1"}
        )
        assert again.status_code == 200, again.text
        assert (again.json()["created"], again.json()["turnId"]) == (False, first.json()["turnId"])
        second = await client.post(f"/v1/sessions/{session}/input", json={"text": "more"})
        assert second.status_code == 201, second.text

        finished = await _finished(client, session, 2)
        events = await _events(client, session)
        assert [e["payload"]["data"]["text"] for e in finished] == ["echo: hi", "echo: more"]
        assert len(_of_type(events, "turn.started")) == 2  # r1 was delivered once
        assert len(_of_type(events, "message.sent")) == 2
        assert all(e["payload"]["usageReported"] for e in finished)
        assert finished[0]["payload"]["usage"] == {"inputTokens": 1, "outputTokens": 2}
        inbound = [e for e in events if e["payload"]["direction"] == "inbound"]
        assert [e["payload"]["backendSeq"] for e in inbound] == list(range(1, len(inbound) + 1))
        assert all(e["payload"]["stateOwner"] == "external" for e in events)

        run = await client.post(f"/v1/sessions/{session}/run")
        assert (run.status_code, run.json()["error"]["code"]) == (409, "external_session")

        closed = await client.post(f"/v1/sessions/{session}/close")
        assert closed.status_code == 200
        assert closed.json()["external"]["status"] == "closed"
        late = await client.post(f"/v1/sessions/{session}/input", json={"text": "late"})
        assert (late.status_code, late.json()["error"]["code"]) == (409, "external_session_closed")
        assert _of_type(await _events(client, session), "session.closed")


async def test_the_edge_event_door_refuses_native_writes_to_an_external_session(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    """Seed 001 §2: an external session's state lives at its backend, so `/events` (a native
    write) is 409 external_session and records and sends nothing; `/input` still forwards."""
    async with serve_api(database_dsn) as api, api.client() as client:
        await PostgresTenantConfigs(pool).put("acme", _document())
        session = (await _open(client))["id"]
        before = await _events(client, session)

        refused = await client.post(
            f"/v1/sessions/{session}/events",
            json={"kind": "user.message", "payload": {"text": "sneaked"}, "requestId": "e1"},
        )
        assert (refused.status_code, refused.json()["error"]["code"]) == (409, "external_session")
        assert await _events(client, session) == before

        forwarded = await client.post(
            f"/v1/sessions/{session}/input", json={"text": "hi", "requestId": "e1"}
        )
        assert forwarded.status_code == 201, forwarded.text
        (finished,) = await _finished(client, session, 1)
        assert finished["payload"]["data"]["text"] == "echo: hi"
        sent = _of_type(await _events(client, session), "message.sent")
        assert [e["payload"]["text"] for e in sent] == ["hi"]


async def test_the_tenants_quota_decides_what_may_open(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    configs = PostgresTenantConfigs(pool)
    async with serve_api(database_dsn) as api, api.client() as client:
        await configs.put("acme", _document(maxSessions=1))
        unknown = await client.post("/v1/sessions", json={"backend": "nope"})
        assert (unknown.status_code, unknown.json()["error"]["code"]) == (400, "unknown_backend")
        assert "declared: ref" in unknown.json()["error"]["message"]
        await _open(client)
        over = await client.post("/v1/sessions", json={"backend": "ref"})
        assert (over.status_code, over.json()["error"]["code"]) == (429, "external_quota_exceeded")

        await configs.put("acme", _document("--no-usage"))
        refused = await _until(
            lambda: _status_of_open(client, 403), "the new document refuses unmetered"
        )
        assert refused["error"]["code"] == "unmetered_refused"
        sessions = (await client.get("/v1/sessions")).json()["sessions"]
        assert len(sessions) == 1  # nothing was created by the refusals

        await configs.put("acme", _document("--no-usage", quota={"unmetered": "allow"}))
        allowed = await _until(lambda: _status_of_open(client, 201), "unmetered allowed")
        assert allowed["external"]["metering"] == "none"
        reply = await client.post(f"/v1/sessions/{allowed['id']}/input", json={"text": "x"})
        assert reply.status_code == 201, reply.text
        (finished,) = await _finished(client, allowed["id"], 1)
        assert "usage" not in finished["payload"]["data"]
        assert "usageReported" not in finished["payload"]


async def _status_of_open(client: httpx.AsyncClient, status: int) -> dict[str, Any] | None:
    response = await client.post("/v1/sessions", json={"backend": "ref"})
    if response.status_code != status:
        return None
    body: dict[str, Any] = response.json()
    return body


async def test_cancel_reaches_the_backend_and_a_refusal_is_a_5xx(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    configs = PostgresTenantConfigs(pool)
    async with serve_api(database_dsn) as api, api.client() as client:
        slow = _document("--slow-ms", "400")["external"]["backends"]["ref"]
        stubborn = _document("--slow-ms", "400", "--ignore-cancel")["external"]["backends"]["ref"]
        backends = {"slow": slow, "stubborn": stubborn}
        await configs.put(
            "acme", {"external": {"backends": backends, "quota": {"unmetered": "deny"}}}
        )
        for backend, status, code in (
            ("slow", 200, None),
            ("stubborn", 502, "backend_cancel_refused"),
        ):
            opened = await client.post("/v1/sessions", json={"backend": backend})
            session = opened.json()["id"]
            none_yet = await client.post(f"/v1/sessions/{session}/cancel")
            assert none_yet.status_code == 409, none_yet.text
            sent = await client.post(f"/v1/sessions/{session}/input", json={"text": "a b c d"})
            cancel = await client.post(f"/v1/sessions/{session}/cancel")
            assert cancel.status_code == status, cancel.text
            if code is None:
                assert cancel.json() == {
                    "cancelRequested": True, "turnId": sent.json()["turnId"], "cancelled": True
                }  # fmt: skip
                await _until(partial(_has_type, client, session, "turn.cancelled"), "cancelled")
            else:
                assert cancel.json()["error"]["code"] == code
                await _finished(client, session, 1)  # the turn went on


async def _has_type(client: httpx.AsyncClient, session: str, kind: str) -> bool:
    return bool(_of_type(await _events(client, session), kind))


async def _external_status(client: httpx.AsyncClient, session: str) -> str:
    status: str = (await client.get(f"/v1/sessions/{session}")).json()["external"]["status"]
    return status


async def _generation(client: httpx.AsyncClient) -> int:
    backends = (await client.get("/v1/external/backends")).json()["backends"]
    return max((b["generation"] for b in backends if b["up"]), default=0)


async def test_a_killed_backend_makes_its_sessions_unavailable_and_a_restart_resumes_them(
    database_dsn: str, pool: asyncpg.Pool, tmp_path: Path
) -> None:
    state = tmp_path / f"state-{uuid.uuid4().hex}.json"
    async with serve_api(database_dsn) as api, api.client() as client:
        await PostgresTenantConfigs(pool).put(
            "acme", _document("--state-file", str(state), "--slow-ms", "200")
        )
        session = (await _open(client))["id"]
        await client.post(f"/v1/sessions/{session}/input", json={"text": "one two three"})
        await _until(lambda: _has_type(client, session, "text.delta"), "the turn streams")
        (pid,) = processes_with(str(state))
        os.kill(pid, signal.SIGKILL)  # mid-turn
        began = time.monotonic()
        await _until(
            lambda: _is(client, session, "backend-unavailable"), "marked backend-unavailable"
        )
        assert time.monotonic() - began < 5.0
        refused = await client.post(f"/v1/sessions/{session}/input", json={"text": "x"})
        assert refused.json()["error"]["code"] == "external_session_unavailable"
        await _until(lambda: _is(client, session, "active"), "resumed after the restart")
        events = await _events(client, session)
        assert _of_type(events, "backend.unavailable")
        assert _of_type(events, "session.resumed")
        again = await client.post(f"/v1/sessions/{session}/input", json={"text": "four"})
        assert again.status_code == 201, again.text
        finished = await _finished(client, session, 1)
        assert finished[-1]["payload"]["data"]["text"] == "echo: four"


async def test_a_backend_that_cannot_resume_keeps_its_sessions_unavailable(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    marker = f"KEEL_TEST_MARK_{uuid.uuid4().hex.upper()}"
    async with serve_api(database_dsn) as api, api.client() as client:
        await PostgresTenantConfigs(pool).put("acme", _document("--forbid-env", marker))
        session = (await _open(client))["id"]
        generation = await _generation(client)
        (pid,) = processes_with(marker)
        os.kill(pid, signal.SIGKILL)
        await _until(lambda: _is(client, session, "backend-unavailable"), "marked unavailable")
        await _until(
            lambda: _at_least(_generation(client), generation + 1), "the backend restarted"
        )
        assert await _external_status(client, session) == "backend-unavailable"
        await _until(lambda: _has_type(client, session, "backend.unavailable"), "recorded")


async def _is(client: httpx.AsyncClient, session: str, status: str) -> bool:
    return await _external_status(client, session) == status


async def _at_least(value: Awaitable[int], floor: int) -> bool:
    return await value >= floor


async def test_an_http_backend_serves_sessions_and_its_death_is_noticed_within_a_bound(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    sidecar = await ProviderProcess.spawn(
        [sys.executable, "-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent", "--http", "0"],
        {"PATH": os.environ["PATH"]},
    )
    try:
        assert sidecar.proc.stdout is not None
        line = await asyncio.wait_for(sidecar.proc.stdout.readline(), DEADLINE_S)
        url = line.decode().split()[1]
        backend = {"transport": "http", "url": url, "timeoutMs": 5000}
        document = {"external": {"backends": {"ref": backend}, "quota": {"unmetered": "deny"}}}
        async with serve_api(database_dsn) as api, api.client() as client:
            await PostgresTenantConfigs(pool).put("acme", document)
            session = (await _open(client))["id"]
            sent = await client.post(f"/v1/sessions/{session}/input", json={"text": "over http"})
            assert sent.status_code == 201, sent.text
            (finished,) = await _finished(client, session, 1)
            assert finished["payload"]["data"]["text"] == "echo: over http"
            os.killpg(sidecar.pgid, signal.SIGKILL)
            began = time.monotonic()
            await _until(partial(_is, client, session, "backend-unavailable"), "unavailable")
            assert time.monotonic() - began < 10.0  # health every 2 s, lost after 2 failures
    finally:
        await sidecar.terminate(grace_s=0.0)
