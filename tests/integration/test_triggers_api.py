"""/v1/triggers over HTTP: create, list, get, pause, resume, delete, firings, and inbound
webhooks (Standard Webhooks and GitHub signatures, de-duplication, refusals)."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from tests.support.api import Api, serve_api


@pytest.fixture
async def api(database_dsn: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Api]:
    monkeypatch.setenv("KEEL_TRIGGERS_MIN_INTERVAL_S", "2")
    async with serve_api(database_dsn) as served:
        yield served


def schedule(**changes: Any) -> dict[str, Any]:
    return {
        "kind": "schedule",
        "schedule": {"cron": "0 9 * * 1-5", "timezone": "Europe/Berlin", "jitterS": 30},
        "target": {"newSession": True},
        "input": {"text": "daily report for {{nominalTime}}"},
        "overlap": "buffer_one",
        **changes,
    }


def error_code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


async def test_triggers_are_created_listed_paused_resumed_and_deleted(api: Api) -> None:
    async with api.client() as client:
        ids = []
        for _ in range(3):
            created = await client.post("/v1/triggers", json=schedule())
            assert created.status_code == 201, created.text
            ids.append(created.json()["id"])
        view = created.json()
        assert view["state"] == "active"
        assert view["secret"] is None
        assert view["schedule"]["timezone"] == "Europe/Berlin"
        nominal = datetime.fromisoformat(view["nextNominalTime"])
        assert nominal.astimezone(UTC).hour in (7, 8), "09:00 Berlin time"
        first = await client.get("/v1/triggers", params={"limit": 2})
        assert len(first.json()["triggers"]) == 2
        rest = await client.get("/v1/triggers", params={"cursor": first.json()["nextCursor"]})
        assert rest.json()["nextCursor"] is None
        listed = [t["id"] for t in first.json()["triggers"] + rest.json()["triggers"]]
        assert listed == sorted(ids)
        paused = await client.post(f"/v1/triggers/{ids[0]}/pause")
        assert (paused.json()["state"], paused.json()["nextFireAt"]) == ("paused", None)
        resumed = await client.post(f"/v1/triggers/{ids[0]}/resume")
        assert resumed.json()["state"] == "active"
        assert resumed.json()["nextFireAt"] is not None
        firings = await client.get(f"/v1/triggers/{ids[0]}/firings")
        assert firings.json() == {"firings": [], "nextCursor": None}
        assert (await client.delete(f"/v1/triggers/{ids[0]}")).status_code == 204
        gone = await client.get(f"/v1/triggers/{ids[0]}")
        assert (gone.status_code, error_code(gone)) == (404, "trigger_not_found")


@pytest.mark.parametrize(
    "changes",
    [
        {"schedule": {"cron": "0 9 * *"}},
        {"schedule": {"cron": "0 0 31 2 *"}},  # valid fields, never a match
        {"schedule": {"cron": "0 9 * * *", "timezone": "Europe/Atlantis"}},
        {"schedule": {"every": "1s"}},  # below KEEL_TRIGGERS_MIN_INTERVAL_S (2 here)
        {"schedule": {"every": "5s", "cron": "* * * * *"}},
        {"schedule": {"every": "5s", "endAt": "2001-01-01T00:00:00Z"}},
    ],
)
async def test_bad_schedules_are_refused(api: Api, changes: dict[str, Any]) -> None:
    async with api.client() as client:
        refused = await client.post("/v1/triggers", json=schedule(**changes))
    assert (refused.status_code, error_code(refused)) == (400, "invalid_trigger"), refused.text


async def test_bad_shapes_and_unknown_targets_are_refused(api: Api) -> None:
    async with api.client() as client:
        for body in (
            schedule(target={}),
            schedule(overlap="sometimes"),
            schedule(kind="webhook"),
            schedule(input={"text": "x" * 20_000}),
        ):
            refused = await client.post("/v1/triggers", json=body)
            assert (refused.status_code, error_code(refused)) == (400, "invalid_request")
        missing = await client.post("/v1/triggers", json=schedule(target={"session": "nope"}))
        assert (missing.status_code, error_code(missing)) == (404, "session_not_found")


def webhook(scheme: str = "standard", overlap: str = "queue") -> dict[str, Any]:
    return {
        "kind": "webhook",
        "webhook": {"scheme": scheme},
        "target": {"session": "inbox"},
        "input": {"text": "delivery {{deliveryId}}: {{body}}"},
        "overlap": overlap,
    }


def standard_headers(secret: str, msg_id: str, body: bytes) -> dict[str, str]:
    now = datetime.now(UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(msg_id, now, body.decode()),
        "content-type": "application/json",
    }


async def test_a_standard_webhook_commits_once_per_delivery_id(api: Api) -> None:
    ledger_session = "inbox"
    async with api.client() as client, httpx.AsyncClient(base_url=api.url) as anonymous:
        assert (await client.post("/v1/sessions", json={"id": ledger_session})).status_code == 201
        created = (await client.post("/v1/triggers", json=webhook())).json()
        secret, path = created["secret"], created["ingestPath"]
        assert secret.startswith("whsec_")
        body = b'{"event":"ping"}'
        first = await anonymous.post(
            path, content=body, headers=standard_headers(secret, "m1", body)
        )
        assert first.status_code == 202, first.text
        assert first.json()["created"] is True
        again = await anonymous.post(
            path, content=body, headers=standard_headers(secret, "m1", body)
        )
        assert again.json() == {**first.json(), "created": False}
        other = await anonymous.post(
            path, content=body, headers=standard_headers(secret, "m2", body)
        )
        assert other.json()["seq"] == first.json()["seq"] + 1
        events = (await client.get(f"/v1/sessions/{ledger_session}/events")).json()["events"]
        texts = [e["payload"]["text"] for e in events if e["kind"] == "user.message"]
        assert texts == ['delivery m1: {"event":"ping"}', 'delivery m2: {"event":"ping"}']
        request_ids = [e["payload"]["requestId"] for e in events if e["kind"] == "user.message"]
        assert request_ids == [f"trigger:{created['id']}:m1", f"trigger:{created['id']}:m2"]
        history = (await client.get(f"/v1/triggers/{created['id']}/firings")).json()["firings"]
        assert [f["key"] for f in history] == ["m2", "m1"]


async def test_webhook_refusals(api: Api) -> None:
    async with api.client() as client, httpx.AsyncClient(base_url=api.url) as anonymous:
        await client.post("/v1/sessions", json={"id": "inbox"})
        created = (await client.post("/v1/triggers", json=webhook())).json()
        path, secret = created["ingestPath"], created["secret"]
        body = b"{}"
        forged = await anonymous.post(path, content=body, headers=standard_headers(
            "whsec_" + "QUJD" * 8, "m1", body))  # fmt: skip
        assert (forged.status_code, error_code(forged)) == (401, "webhook_signature_invalid")
        unnamed = standard_headers(secret, "m1", body)
        del unnamed["webhook-id"]
        missing = await anonymous.post(path, content=body, headers=unnamed)
        assert (missing.status_code, error_code(missing)) == (400, "webhook_delivery_id_missing")
        big = b"x" * (256 * 1024 + 1)
        too_big = await anonymous.post(
            path, content=big, headers=standard_headers(secret, "m", big)
        )
        assert too_big.status_code == 413
        await client.post(f"/v1/triggers/{created['id']}/pause")
        paused = await anonymous.post(
            path, content=body, headers=standard_headers(secret, "m3", body)
        )
        assert (paused.status_code, error_code(paused)) == (409, "trigger_paused")
        scheduled = (await client.post("/v1/triggers", json=schedule())).json()
        wrong = await anonymous.post(
            f"/v1/triggers/{scheduled['id']}/ingest", content=body,
            headers=standard_headers(secret, "m4", body),
        )  # fmt: skip
        assert (wrong.status_code, error_code(wrong)) == (409, "trigger_not_webhook")
        unknown = await anonymous.post("/v1/triggers/tr_0000000000000000/ingest", content=body)
        assert (unknown.status_code, error_code(unknown)) == (404, "trigger_not_found")


async def test_a_github_webhook_into_new_sessions(api: Api) -> None:
    async with api.client() as client, httpx.AsyncClient(base_url=api.url) as anonymous:
        body = webhook("github")
        body["target"] = {"newSession": True}
        created = (await client.post("/v1/triggers", json=body)).json()
        payload = b'{"action":"opened"}'
        signature = hmac.new(created["secret"].encode(), payload, hashlib.sha256).hexdigest()
        headers = {"X-Hub-Signature-256": f"sha256={signature}", "X-GitHub-Delivery": "gh-1"}
        answer = await anonymous.post(created["ingestPath"], content=payload, headers=headers)
        assert answer.status_code == 202, answer.text
        session = answer.json()["session"]
        assert session.startswith(f"{created['id']}-d-")
        assert answer.json()["seq"] == 1
        bad = {**headers, "X-Hub-Signature-256": "sha256=" + "0" * 64}
        refused = await anonymous.post(created["ingestPath"], content=payload, headers=bad)
        assert refused.status_code == 401
        view = (await client.get(f"/v1/sessions/{session}")).json()
        assert view["run"]["status"] == "pending"


def github_headers(secret: str, delivery: str, body: bytes) -> dict[str, str]:
    signature = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Hub-Signature-256": f"sha256={signature}", "X-GitHub-Delivery": delivery}


async def user_texts(client: httpx.AsyncClient, session: str) -> list[str]:
    events = (await client.get(f"/v1/sessions/{session}/events")).json()["events"]
    return [e["payload"]["text"] for e in events if e["kind"] == "user.message"]


async def test_a_replayed_github_delivery_with_a_new_delivery_id_commits_nothing(
    api: Api,
) -> None:
    """GitHub signs the body, not X-GitHub-Delivery: the body's digest is the key."""
    async with api.client() as client, httpx.AsyncClient(base_url=api.url) as anonymous:
        await client.post("/v1/sessions", json={"id": "inbox"})
        created = (await client.post("/v1/triggers", json=webhook("github"))).json()
        payload = b'{"action":"opened","number":7}'
        first = await anonymous.post(
            created["ingestPath"], content=payload,
            headers=github_headers(created["secret"], "gh-1", payload),
        )  # fmt: skip
        assert (first.status_code, first.json()["created"]) == (202, True), first.text
        for replay in range(5):
            again = await anonymous.post(
                created["ingestPath"], content=payload,
                headers=github_headers(created["secret"], f"forged-{replay}", payload),
            )  # fmt: skip
            assert again.json() == {**first.json(), "created": False}
        other = b'{"action":"closed","number":7}'
        second = await anonymous.post(
            created["ingestPath"], content=other,
            headers=github_headers(created["secret"], "gh-2", other),
        )  # fmt: skip
        assert second.json()["created"] is True
        assert await user_texts(client, "inbox") == [
            f"delivery gh-1: {payload.decode()}",
            f"delivery gh-2: {other.decode()}",
        ]


async def test_a_template_that_could_outgrow_one_event_is_refused_at_creation(api: Api) -> None:
    async with api.client() as client:
        await client.post("/v1/sessions", json={"id": "inbox"})
        for text in ("{{body}}" * 2048, "{{body}} and {{body}}", "{{deliveryId}} {{body}}" * 3):
            spec = {**webhook(), "input": {"text": text}}
            refused = await client.post("/v1/triggers", json=spec)
            assert (refused.status_code, error_code(refused)) == (400, "invalid_trigger")
        many_bodies_on_a_schedule = schedule(input={"text": "{{body}}" * 2048})
        assert (
            await client.post("/v1/triggers", json=many_bodies_on_a_schedule)
        ).status_code == 201
        ids = {**webhook(), "input": {"text": "{{deliveryId}}" * 1000 + "{{body}}"}}
        assert (await client.post("/v1/triggers", json=ids)).status_code == 201
        assert (await client.post("/v1/triggers", json=webhook())).status_code == 201


async def test_sender_values_are_never_read_as_template_syntax(api: Api) -> None:
    """A delivery id or body holding `{{body}}` is inserted as text, once."""
    async with api.client() as client, httpx.AsyncClient(base_url=api.url) as anonymous:
        await client.post("/v1/sessions", json={"id": "inbox"})
        created = (await client.post("/v1/triggers", json=webhook())).json()
        payload = b'{"note":"{{deliveryId}} {{trigger}}"}'
        delivery = "{{body}}" * 25
        answer = await anonymous.post(
            created["ingestPath"], content=payload,
            headers=standard_headers(created["secret"], delivery, payload),
        )  # fmt: skip
        assert answer.status_code == 202, answer.text
        assert await user_texts(client, "inbox") == [f"delivery {delivery}: {payload.decode()}"]


async def test_a_delivery_whose_message_would_not_fit_one_event_is_413_and_records_nothing(
    api: Api,
) -> None:
    async with api.client() as client, httpx.AsyncClient(base_url=api.url) as anonymous:
        await client.post("/v1/sessions", json={"id": "inbox"})
        created = (await client.post("/v1/triggers", json=webhook())).json()
        payload = b"\x01" * (200 * 1024)  # each escapes to \u0001: 1.2 MB serialized
        refused = await anonymous.post(
            created["ingestPath"], content=payload,
            headers=standard_headers(created["secret"], "m1", payload),
        )  # fmt: skip
        assert (refused.status_code, error_code(refused)) == (413, "payload_too_large")
        firings = (await client.get(f"/v1/triggers/{created['id']}/firings")).json()["firings"]
        assert firings == []
        assert await user_texts(client, "inbox") == []
