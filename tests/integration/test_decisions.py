"""Decisions against real PostgreSQL: a gated tool call opens a decision, the worker settles
holding no lease, the answer (a day later by the API's clock) resumes the run from the log, and
the tool runs exactly once with the approved arguments."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import asyncpg
import pytest

from keel_stream.store import PostgresLedger
from keel_stream.store.deadlines import PostgresDeadlines
from keel_stream.worker.expiry import DecisionSweeper
from tests.support.api import serve_api
from tests.support.decisions import (
    ALL_OUTCOMES,
    MovableClock,
    final_answers,
    log_of,
    open_decisions,
    policy,
    results,
)
from tests.support.wait import wait_until
from tests.support.workers import settled, worker_task

GATED = policy(note=ALL_OUTCOMES)


@pytest.fixture
def notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "notes.txt"
    monkeypatch.setenv("KEEL_TOOL_NOTES_FILE", str(target))
    return target


def lines(notes: Path) -> list[str]:
    return notes.read_text().splitlines() if notes.exists() else []


async def test_a_gated_call_waits_without_a_lease_and_runs_once_when_approved_a_day_later(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, notes: Path
) -> None:
    clock = MovableClock()
    async with (
        serve_api(database_dsn, boot_config=GATED) as api,
        worker_task(database_dsn, boot_config=GATED),
        api.client() as client,
    ):
        api.config.clock = clock
        sid = (await client.post("/v1/sessions")).json()["id"]
        text = '[[tool:note {"text": "deploy"}]] [[tool:echo {"x": 1}]]'
        await client.post(f"/v1/sessions/{sid}/input", json={"text": text})
        (decision,) = await open_decisions(client, sid, 1)
        await settled(pool, sid, "done")
        lease = await pool.fetchval(
            "SELECT lease_owner FROM runs WHERE tenant_id = 'acme' AND session_id = $1", sid
        )
        assert lease is None, "no worker holds the session while the decision is open"
        log = await log_of(ledger, sid)
        assert set(results(log)) == {f"{decision['id']}-2"}, "the ungated sibling ran"
        assert lines(notes) == [], "the gated tool has not run"
        head = log[-1].seq
        status = (await client.get(f"/v1/sessions/{sid}/status?atSeq={head}")).json()["state"]
        assert status["openDecisions"] == [decision["id"]]
        assert status["owedTurn"] is False
        view = (await client.get(f"/v1/sessions/{sid}")).json()
        assert view["run"]["openDecisions"] == [decision["id"]]

        clock.advance(days=1)
        url = f"/v1/sessions/{sid}/decisions/{decision['id']}"
        stale = await client.post(url, json={"outcome": "approve", "argsDigest": "sha256:00"})
        assert (stale.status_code, stale.json()["error"]["code"]) == (409, "decision_stale")
        approve = {"outcome": "approve", "argsDigest": decision["argsDigest"]}
        first = await client.post(url, json=approve)
        assert first.status_code == 201, first.text
        again = await client.post(url, json=approve)
        assert (again.status_code, again.json()["created"]) == (200, False)
        view = (await client.get(f"/v1/sessions/{sid}")).json()
        assert view["run"]["openDecisions"] == []
        other = await client.post(url, json={**approve, "outcome": "reject"})
        assert (other.status_code, other.json()["error"]["code"]) == (
            409,
            "decision_already_answered",
        )

        async def answered() -> bool:
            return len(final_answers(await log_of(ledger, sid))) == 1

        await wait_until(answered, 30, "the run resumed and answered")
        await settled(pool, sid, "done")
    log = await log_of(ledger, sid)
    assert lines(notes) == ["deploy"], "the approved tool ran exactly once, as opened"
    result = results(log)[decision["id"]]
    assert result.payload["decision"]["outcome"] == "approve"
    answer_event = next(e for e in log if e.seq == first.json()["seq"])
    assert answer_event.payload["decision"]["answeredBy"].startswith("key:k_")
    assert [e.kind for e in log].count("assistant.message") == 2, "no generation re-asked"


async def test_each_decision_of_one_answer_is_answered_on_its_own(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, notes: Path
) -> None:
    async with (
        serve_api(database_dsn, boot_config=GATED) as api,
        worker_task(database_dsn, boot_config=GATED),
        api.client() as client,
    ):
        sid = (await client.post("/v1/sessions")).json()["id"]
        calls = " ".join(f'[[tool:note {{"text": "{word}"}}]]' for word in "abcd")
        await client.post(f"/v1/sessions/{sid}/input", json={"text": calls})
        opened = await open_decisions(client, sid, 4)
        answers: list[dict[str, Any]] = [
            {"outcome": "approve"},
            {"outcome": "edit", "args": {"text": "B-edited"}},
            {"outcome": "reject", "reason": "not today"},
            {"outcome": "respond", "response": "D answered by a person"},
        ]
        for decision, answer in zip(opened, answers, strict=True):
            url = f"/v1/sessions/{sid}/decisions/{decision['id']}"
            posted = await client.post(url, json={**answer, "argsDigest": decision["argsDigest"]})
            assert posted.status_code == 201, posted.text

        async def answered() -> bool:
            return len(final_answers(await log_of(ledger, sid))) == 1

        await wait_until(answered, 30, "the run resumed after the four answers")
    log = await log_of(ledger, sid)
    by_call = results(log)
    texts = [by_call[d["id"]].payload["content"][0]["text"] for d in opened]
    assert lines(notes) == ["a", "B-edited"], "approve and edit ran; reject and respond did not"
    assert texts[2] == "rejected: not today"
    assert by_call[opened[2]["id"]].payload["isError"] is True
    assert texts[3] == "D answered by a person"
    assert by_call[opened[1]["id"]].payload["decision"]["args"] == {"text": "B-edited"}


async def test_an_expired_decision_resumes_as_rejected_and_a_late_answer_is_refused(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, notes: Path
) -> None:
    short = policy(note={"approval": "always", "expiresAfterS": 60, "onExpire": "reject"})
    clock = MovableClock()
    async with (
        serve_api(database_dsn, boot_config=short) as api,
        worker_task(database_dsn, boot_config=short),
        api.client() as client,
    ):
        api.config.clock = clock
        sid = (await client.post("/v1/sessions")).json()["id"]
        await client.post(f"/v1/sessions/{sid}/input", json={"text": '[[tool:note {"text": "x"}]]'})
        (decision,) = await open_decisions(client, sid, 1)
        await settled(pool, sid, "done")
        clock.advance(minutes=2)
        listed = await client.get(f"/v1/sessions/{sid}/decisions?state=expired")
        assert [d["id"] for d in listed.json()["decisions"]] == [decision["id"]]
        url = f"/v1/sessions/{sid}/decisions/{decision['id']}"
        late = await client.post(
            url, json={"outcome": "approve", "argsDigest": decision["argsDigest"]}
        )
        assert (late.status_code, late.json()["error"]["code"]) == (409, "decision_expired")
        sweeper = DecisionSweeper(ledger, PostgresDeadlines(pool), "test-sweeper", clock=clock)
        assert await sweeper.sweep_once() == 1
        assert await sweeper.sweep_once() == 0, "an expired decision is answered once"

        async def answered() -> bool:
            return len(final_answers(await log_of(ledger, sid))) == 1

        await wait_until(answered, 30, "the run resumed after the expiry")
    log = await log_of(ledger, sid)
    result = results(log)[decision["id"]]
    assert result.payload["isError"] is True
    assert result.payload["content"][0]["text"] == "rejected: the decision expired unanswered"
    assert result.payload["decision"]["system"] is True
    assert lines(notes) == []


async def test_plain_input_cannot_answer_a_decision(database_dsn: str) -> None:
    async with serve_api(database_dsn) as api, api.client() as client:
        sid = (await client.post("/v1/sessions")).json()["id"]
        forged = {"text": "hi", "decision": {"id": "c", "outcome": "approve", "argsDigest": "x"}}
        for body in (forged, {"text": "hi", "requestId": "decision:c"}):
            answer = await client.post(f"/v1/sessions/{sid}/input", json=body)
            assert (answer.status_code, answer.json()["error"]["code"]) == (
                400,
                "decision_reserved",
            )
        missing = await client.post(
            f"/v1/sessions/{sid}/decisions/nope", json={"outcome": "approve", "argsDigest": "x"}
        )
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "decision_not_found")


async def test_an_expired_decision_whose_policy_says_cancel_cancels_the_run(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, notes: Path
) -> None:
    short = policy(note={"approval": "always", "expiresAfterS": 1, "onExpire": "cancel"})
    clock = MovableClock()
    async with (
        serve_api(database_dsn, boot_config=short) as api,
        worker_task(database_dsn, boot_config=short),
        api.client() as client,
    ):
        sid = (await client.post("/v1/sessions")).json()["id"]
        await client.post(f"/v1/sessions/{sid}/input", json={"text": '[[tool:note {"text": "x"}]]'})
        (decision,) = await open_decisions(client, sid, 1)
        await settled(pool, sid, "done")
        clock.advance(seconds=5)
        sweeper = DecisionSweeper(ledger, PostgresDeadlines(pool), "test-sweeper", clock=clock)
        await sweeper.sweep_once()

        async def summarised() -> bool:
            log = await log_of(ledger, sid)
            return any(e.payload.get("status") == "cancelled" for e in log)

        await wait_until(summarised, 30, "the run cancelled by the expiry")
        await settled(pool, sid, "failed")
    log = await log_of(ledger, sid)
    result = results(log)[decision["id"]]
    assert result.payload["content"][0]["text"] == "cancelled: the decision expired unanswered"
    assert final_answers(log) == [], "a cancelled run asks the model nothing more"
    assert lines(notes) == []
