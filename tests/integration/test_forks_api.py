"""Forks and reads as of a seq over HTTP: `POST /v1/sessions {"forkOf","atSeq"}`, `?atSeq=N`."""

from __future__ import annotations

from typing import Any

import asyncpg
import httpx
import pytest

from keel_stream.kernel import CommitRequest, Event, LeaseToken, account_inputs
from keel_stream.projections import RUN_STATUS, TRANSCRIPT, Projection, fold
from keel_stream.store import PostgresLedger
from keel_stream.store.keys import PostgresKeyStore
from tests.support.api import Api, serve_api
from tests.support.kafka import KafkaServer
from tests.support.ledger import grant_lease
from tests.support.workers import settled, worker_task

LEASE = LeaseToken(owner="w1", epoch=1)


@pytest.fixture
async def api(database_dsn: str, kafka: KafkaServer, topic_prefix: str) -> Any:
    async with serve_api(database_dsn, kafka.bootstrap, topic_prefix) as served:
        yield served


def commit(kind: str, payload: dict[str, Any], **options: Any) -> CommitRequest:
    return CommitRequest(tenant_id="acme", session_id="src", kind=kind, payload=payload, **options)


async def a_session_with_a_tool_turn(ledger: PostgresLedger, pool: asyncpg.Pool) -> None:
    """src: input, a tool call and its result, the answer, the run summary, a second input."""
    await ledger.create_session("acme", "src")
    await ledger.commit(commit("user.message", {"text": "weather?"}, key="r1"))
    await grant_lease(pool, "acme", "src", LEASE)
    call = {"type": "toolCall", "id": "c1", "name": "weather", "arguments": {"city": "Oslo"}}
    asked = {"content": [call], "inputSeqs": [1], "stopReason": "tool_use"}
    await ledger.commit(commit("assistant.message", asked, key="g1", lease=LEASE))
    result = {"toolCallId": "c1", "content": [{"type": "text", "text": "rain"}]}
    await ledger.commit(commit("tool.result", result, lease=LEASE))
    said = {"content": [{"type": "text", "text": "rain in Oslo"}], "stopReason": "end_turn"}
    await ledger.commit(
        commit("assistant.message", {**said, "inputSeqs": [1]}, key="g2", lease=LEASE)
    )
    summary = {"status": "done", "turns": 2, "tokens": 10, "durationMs": 5}
    await ledger.commit(commit("run.finished", summary, lease=LEASE))
    await ledger.commit(commit("user.message", {"text": "and tomorrow?"}, key="r2"))


def error_code(response: httpx.Response) -> str:
    return str(response.json()["error"]["code"])


READ_MODELS: tuple[tuple[str, Projection[Any]], ...] = (
    ("transcript", TRANSCRIPT),
    ("status", RUN_STATUS),
)


async def test_reads_as_of_every_seq_equal_the_pure_folds(
    api: Api, ledger: PostgresLedger, pool: asyncpg.Pool
) -> None:
    await a_session_with_a_tool_turn(ledger, pool)
    events: list[Event] = await ledger.read_events("acme", "src")
    async with api.client() as client:
        for n in range(len(events) + 1):
            for path, projection in READ_MODELS:
                response = await client.get(f"/v1/sessions/src/{path}", params={"atSeq": n})
                assert response.status_code == 200, response.text
                expected = projection.dump(fold(projection, events[:n]).state)
                assert response.json() == {"lastSeq": n, "state": expected}, (path, n)
        past = await client.get("/v1/sessions/src/transcript", params={"atSeq": 7})
        assert (past.status_code, error_code(past)) == (400, "invalid_page")
        both = await client.get("/v1/sessions/src/status", params={"atSeq": 1, "min_seq": 1})
        assert (both.status_code, error_code(both)) == (400, "invalid_page")


async def test_a_fork_over_http_copies_the_prefix_and_records_provenance(
    api: Api, ledger: PostgresLedger, pool: asyncpg.Pool
) -> None:
    await a_session_with_a_tool_turn(ledger, pool)
    source = (await ledger.read_events("acme", "src"))[:2]
    async with api.client() as client:
        made = await client.post("/v1/sessions", json={"forkOf": "src", "atSeq": 2, "id": "f2"})
        assert made.status_code == 201, made.text
        body = made.json()
        assert (body["id"], body["lastSeq"], body["forkOf"]) == (
            "f2",
            2,
            {"session": "src", "atSeq": 2},
        )
        page = (await client.get("/v1/sessions/f2/events")).json()["events"]
        assert [(e["seq"], e["kind"], e["payload"]) for e in page] == [
            (e.seq, e.kind, e.payload) for e in source
        ]
        assert [e["metadata"]["forkedFrom"]["seq"] for e in page] == [1, 2]
        listed = (await client.get("/v1/sessions", params={"limit": 200})).json()["sessions"]
        assert {s["id"]: s["forkOf"] for s in listed}["src"] is None


async def test_fork_refusals_have_their_codes(
    api: Api, ledger: PostgresLedger, pool: asyncpg.Pool
) -> None:
    await a_session_with_a_tool_turn(ledger, pool)
    await ledger.create_tenant("other")
    _, other_key = await PostgresKeyStore(pool).create("other")
    async with api.client() as client:
        cases = [
            ({"forkOf": "nope"}, 404, "session_not_found"),
            ({"forkOf": "src", "atSeq": 99}, 400, "invalid_request"),
            ({"atSeq": 1}, 400, "invalid_request"),
            ({"forkOf": "src", "atSeq": -1}, 400, "invalid_request"),
            ({"forkOf": "src", "backend": "b"}, 400, "invalid_request"),
            ({"forkOf": "src", "id": "src"}, 409, "session_exists"),
        ]
        for body, status, code in cases:
            response = await client.post("/v1/sessions", json=body)
            assert (response.status_code, error_code(response)) == (status, code), body
    async with api.client(other_key) as stranger:
        response = await stranger.post("/v1/sessions", json={"forkOf": "src"})
        assert (response.status_code, error_code(response)) == (404, "session_not_found")
    assert await ledger.head("acme", "src") == 6


async def test_a_fork_owing_a_run_is_answered_and_one_at_the_head_is_not(
    api: Api, ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str
) -> None:
    await a_session_with_a_tool_turn(ledger, pool)
    async with api.client() as client:
        owed = (await client.post("/v1/sessions", json={"forkOf": "src", "atSeq": 6})).json()
        assert owed["run"]["status"] == "pending", "its last input (seq 6) is unanswered"
        done = (await client.post("/v1/sessions", json={"forkOf": "src", "atSeq": 5})).json()
        assert done["run"]["status"] is None, "every input answered: no run"
        mid = (await client.post("/v1/sessions", json={"forkOf": "src", "atSeq": 3})).json()
        assert mid["run"]["status"] == "pending", "the model owes the turn after the tool result"
        outbox = await pool.fetchval(
            "SELECT count(*) FROM outbox WHERE tenant_id = 'acme' AND session_id = $1", done["id"]
        )
        assert outbox == 5, "each copy is published like any commit"
        async with worker_task(database_dsn):
            for fork in (owed, mid):
                await settled(pool, fork["id"], "done", "failed")
            said = await client.post(f"/v1/sessions/{done['id']}/input", json={"text": "more"})
            assert said.status_code == 201, said.text
            await settled(pool, done["id"], "done", "failed")
    for fork in (owed, mid, done):
        events = await ledger.read_events("acme", fork["id"])
        assert account_inputs(events).unanswered == (), fork
        assert not account_inputs(events).owed_turn, fork
        summaries = [e.payload["status"] for e in events if e.kind == "run.finished"]
        assert summaries[-1] == "done", (fork, summaries)
