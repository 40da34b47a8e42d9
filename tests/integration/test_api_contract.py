"""The contract pages §8 and §9 over HTTP: one set of rule codes at both doors, capabilities
that tell the truth, and POST /run that says what it did (real api, PostgreSQL, broker, worker).
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg
import httpx
import pytest

from keel_stream.kernel import CommitRequest
from keel_stream.store import PostgresLedger
from keel_stream.store.runs import PostgresRuns
from tests.support.api import Api, serve_api
from tests.support.kafka import KafkaServer
from tests.support.wait import wait_until
from tests.support.workers import log_of, run_status, settled, worker_task

# (a user.message payload, the code both doors answer with 400)
BAD_PAYLOADS: list[tuple[Any, str]] = [
    ({"text": 5}, "text_not_string"),
    ({"text": None}, "text_not_string"),
    ({"text": "hi", "requestId": 7}, "request_id_not_string"),
    ({"text": "hi", "requestId": None}, "request_id_not_string"),
    ({"text": "hi", "requestId": ""}, "invalid_identifier"),
    ({"text": "hi", "delivery": "later"}, "delivery_invalid"),
    ({"text": "hi", "delivery": None}, "delivery_invalid"),
    ({"text": "hi", "delivery": "QUEUE"}, "delivery_invalid"),
    ({"text": "hi", "selection": [1, 2]}, "selection_not_object"),
    ({"text": "hi", "selection": None}, "selection_not_object"),
    ({"text": "hi", "retryOf": -1}, "retry_of_invalid"),
    ({"text": "hi", "retryOf": 1.5}, "retry_of_invalid"),
    ({"text": "hi", "retryOf": True}, "retry_of_invalid"),
    ({"text": "hi", "retryOf": None}, "retry_of_invalid"),
    ({"text": "a\u0000b"}, "payload_not_json"),
    ({"text": "hi", "big": 2**70}, "payload_not_json"),
    ([{"text": "hi"}], "payload_not_object"),
    ("hi", "payload_not_object"),
    (None, "payload_not_object"),
]


@pytest.fixture
async def api(database_dsn: str) -> Any:
    async with serve_api(database_dsn) as served:
        yield served


async def post_json(client: httpx.AsyncClient, path: str, body: Any) -> httpx.Response:
    """POST exactly this JSON (httpx sends no body at all for json=None)."""
    content = json.dumps(body).encode()
    return await client.post(path, content=content, headers={"content-type": "application/json"})


async def new_session(client: httpx.AsyncClient) -> str:
    response = await client.post("/v1/sessions")
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def code_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, str(response.json()["error"]["code"])


async def test_both_doors_answer_the_same_rule_code_for_the_same_payload(api: Api) -> None:
    async with api.client() as client:
        sid = await new_session(client)
        answers = []
        for payload, _code in BAD_PAYLOADS:
            at_input = await post_json(client, f"/v1/sessions/{sid}/input", payload)
            at_events = await post_json(
                client, f"/v1/sessions/{sid}/events", {"kind": "user.message", "payload": payload}
            )
            answers.append((payload, code_of(at_input), code_of(at_events)))
        assert [(p, a, b) for p, a, b in answers if a != b] == [], "the doors disagree"
        assert [a for _, a, _ in answers] == [(400, code) for _, code in BAD_PAYLOADS]
        assert (await client.get(f"/v1/sessions/{sid}")).json()["lastSeq"] == 0


async def test_input_stores_unknown_and_null_fields_exactly_as_sent(api: Api) -> None:
    body = {"text": "hi", "meta": None, "x": None, "nested": {"y": None, "z": [None, 1]}}
    async with api.client() as client:
        sid = await new_session(client)
        at_input = await client.post(f"/v1/sessions/{sid}/input", json=body)
        at_events = await client.post(
            f"/v1/sessions/{sid}/events", json={"kind": "user.message", "payload": body}
        )
        assert (at_input.status_code, at_events.status_code) == (201, 201)
        events = (await client.get(f"/v1/sessions/{sid}/events")).json()["events"]
    ids = [at_input.json()["requestId"], at_events.json()["requestId"]]
    assert all(ids), "a requestId is generated when absent"
    assert [e["payload"] for e in events] == [{**body, "requestId": i} for i in ids]


async def test_input_keeps_idempotency_and_the_degraded_guide(api: Api) -> None:
    body = {"text": "now", "requestId": "r-1", "delivery": "guide", "x": None}
    async with api.client() as client:
        sid = await new_session(client)
        first = await client.post(f"/v1/sessions/{sid}/input", json=body)
        retry = await client.post(f"/v1/sessions/{sid}/input", json=body)
        (event,) = (await client.get(f"/v1/sessions/{sid}/events")).json()["events"]
    assert (first.status_code, retry.status_code) == (201, 200)
    assert first.json()["delivery"] == retry.json()["delivery"] == "queue"
    assert event["payload"] == {**body, "delivery": "queue"}, "the written event says queue"


async def test_both_doors_refuse_a_body_that_is_not_strict_json_alike(api: Api) -> None:
    async with api.client() as client:
        sid = await new_session(client)
        for raw, code in (
            (b'{"text": NaN}', "payload_not_json"),
            (b'{"text": "hi", "n": 1e999}', "payload_not_json"),
            (b"{oops", "invalid_request"),
            (b"", "invalid_request"),
            (b"[" * 5000, "invalid_request"),
        ):
            at_input = await client.post(
                f"/v1/sessions/{sid}/input",
                content=raw,
                headers={"content-type": "application/json"},
            )
            at_events = await client.post(
                f"/v1/sessions/{sid}/events",
                content=b'{"kind": "user.message", "payload": ' + raw + b"}",
                headers={"content-type": "application/json"},
            )
            assert code_of(at_input) == code_of(at_events) == (400, code), raw
        form = await client.post(f"/v1/sessions/{sid}/input", data={"text": "hi"})
        assert code_of(form) == (400, "invalid_request")
        assert (await client.get(f"/v1/sessions/{sid}")).json()["lastSeq"] == 0


async def test_the_input_body_is_described_in_openapi(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url) as client:
        spec = (await client.get("/openapi.json")).json()
    body = spec["paths"]["/v1/sessions/{session_id}/input"]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    assert body["required"] is True
    assert schema["type"] == "object"
    assert schema["additionalProperties"] is True
    assert set(schema["properties"]) == {"text", "requestId", "delivery", "selection", "retryOf"}
    assert schema["properties"]["delivery"]["enum"] == ["queue", "guide"]


async def test_capabilities_partials_false_without_a_broker(database_dsn: str) -> None:
    async with serve_api(database_dsn) as api, api.client() as client:
        body = (await client.get("/v1/capabilities")).json()
    assert body["features"]["partials"] is False
    assert (body["limits"]["sessionsPageDefault"], body["limits"]["sessionsPageMax"]) == (50, 200)


async def test_capabilities_partials_false_while_the_broker_is_unreachable(
    database_dsn: str,
) -> None:
    async with serve_api(database_dsn, bootstrap="127.0.0.1:1") as api, api.client() as client:
        body = (await client.get("/v1/capabilities")).json()
    assert body["features"]["partials"] is False


async def test_capabilities_partials_true_once_partials_are_consumed(
    database_dsn: str, kafka: KafkaServer, topic_prefix: str
) -> None:
    async with (
        serve_api(database_dsn, kafka.bootstrap, topic_prefix) as api,
        api.client() as client,
    ):

        async def partials() -> bool:
            return bool((await client.get("/v1/capabilities")).json()["features"]["partials"])

        await wait_until(partials, 30, "partials in the capabilities")


async def test_run_answers_nothing_owed_once_the_input_is_answered(
    api: Api, database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger
) -> None:
    async with api.client() as client:
        sid = await new_session(client)
        async with worker_task(database_dsn):
            await client.post(f"/v1/sessions/{sid}/input", json={"text": "hello"})
            await settled(pool, sid, "done")
        before = len(await log_of(ledger, sid))
        response = await client.post(f"/v1/sessions/{sid}/run")
        assert (response.status_code, response.json()) == (
            200,
            {"queued": False, "reason": "nothing_owed", "status": "done"},
        )
    assert await run_status(pool, sid) == "done", "nothing was queued"
    assert len(await log_of(ledger, sid)) == before


async def test_run_answers_already_running_while_an_attempt_runs(
    api: Api, database_dsn: str, pool: asyncpg.Pool
) -> None:
    async with api.client() as client, worker_task(database_dsn):
        sid = await new_session(client)
        await client.post(f"/v1/sessions/{sid}/input", json={"text": "[[slow:200]] a b c d e f"})
        await settled(pool, sid, "running", timeout_s=30)
        response = await client.post(f"/v1/sessions/{sid}/run")
        assert (response.status_code, response.json()) == (
            200,
            {"queued": False, "reason": "already_running", "status": "running"},
        )
        await settled(pool, sid, "done")


async def settle_with_answer(
    pool: asyncpg.Pool, ledger: PostgresLedger, sid: str, stop_reason: str, status: str
) -> None:
    """Claim the session's run, commit one answer to input 1 and settle the run as status."""
    claim = await PostgresRuns(pool, "test-owner", 60).claim()
    assert claim is not None
    assert claim.session == sid
    payload = {
        "role": "assistant",
        "content": [{"type": "text", "text": "..."}],
        "inputSeqs": [1],
        "stopReason": stop_reason,
        "generationId": f"g-{stop_reason}",
    }
    await ledger.commit(
        CommitRequest(
            tenant_id="acme",
            session_id=sid,
            kind="assistant.message",
            payload=payload,
            lease=claim.lease,
        )
    )
    await pool.execute(
        "UPDATE runs SET status = $3, lease_owner = NULL, lease_expires_at = NULL "
        "WHERE tenant_id = $1 AND session_id = $2",
        "acme",
        sid,
        status,
    )


@pytest.mark.parametrize(
    ("stop_reason", "status", "answer", "http"),
    [
        ("end_turn", "done", {"queued": False, "reason": "nothing_owed", "status": "done"}, 200),
        ("aborted", "failed", {"queued": True, "reason": None, "status": "pending"}, 202),
        ("error", "failed", {"queued": True, "reason": None, "status": "pending"}, 202),
        ("tool_use", "failed", {"queued": True, "reason": None, "status": "pending"}, 202),
    ],
)
async def test_run_queues_only_when_an_input_or_a_turn_is_owed(
    api: Api,
    pool: asyncpg.Pool,
    ledger: PostgresLedger,
    stop_reason: str,
    status: str,
    answer: dict[str, Any],
    http: int,
) -> None:
    async with api.client() as client:
        sid = await new_session(client)
        await client.post(f"/v1/sessions/{sid}/input", json={"text": "hello"})
        await settle_with_answer(pool, ledger, sid, stop_reason, status)
        response = await client.post(f"/v1/sessions/{sid}/run")
    assert (response.status_code, response.json()) == (http, answer)
    assert await run_status(pool, sid) == answer["status"]
