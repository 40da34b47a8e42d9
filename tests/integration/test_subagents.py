"""Subagents against real PostgreSQL: a parent delegates to two children in parallel, each
child's answer becomes the parent's tool.result once, workers SIGKILLed mid-tree change
nothing of that, and a cancel of the parent stops the children."""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import UTC, datetime
from pathlib import Path

import asyncpg
import httpx
import pytest

from keel_stream.kernel import Event
from keel_stream.store import PostgresLedger
from keel_stream.store.subagents import PostgresSubagents
from keel_stream.tenancy.document import TenantConfig
from keel_stream.tenancy.policy import SubagentSettings
from keel_stream.worker.subagents import Delegations
from tests.support.api import serve_api
from tests.support.decisions import ALL_OUTCOMES, final_answers, log_of, policy, results
from tests.support.wait import wait_until
from tests.support.workers import WorkerProcess, settled, worker_task

TWO = '[[tool:delegate {"task": "alpha"}]] [[tool:delegate {"task": "beta"}]]'


def delegate(slow_ms: int, task: str) -> str:
    """A delegate directive whose task streams slowly (the task's own `]]` escaped in JSON, so
    the parent's directive does not end inside it)."""
    return f'[[tool:delegate {{"task": "[[slow:{slow_ms}\\u005d\\u005d {task}"}}]]'


def delegating(inner: str) -> str:
    """A delegate directive whose task is `inner` (directives included, escaped)."""
    return "[[tool:delegate " + json.dumps({"task": inner}).replace("]", "\\u005d") + "]]"


def reports(log: list[Event]) -> list[Event]:
    return [e for e in log if e.kind == "user.message" and "subagentResult" in e.payload]


async def children(client: httpx.AsyncClient, parent: str, count: int) -> list[str]:
    found: list[str] = []

    async def listed() -> bool:
        page = (await client.get(f"/v1/sessions/{parent}/subagents")).json()
        found[:] = [c["id"] for c in page["subagents"]]
        return len(found) == count

    await wait_until(listed, 30, f"{count} subagents of {parent}")
    return found


async def parent_answered(ledger: PostgresLedger, parent: str, timeout_s: float = 60) -> None:
    async def answered() -> bool:
        return len(final_answers(await log_of(ledger, parent))) == 1

    await wait_until(answered, timeout_s, "the parent's answer after its subagents")


async def test_two_subagents_in_parallel_each_answer_the_parent_once(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger
) -> None:
    async with (
        serve_api(database_dsn) as api,
        worker_task(database_dsn, slots=3),
        api.client() as client,
    ):
        parent = (await client.post("/v1/sessions")).json()["id"]
        await client.post(f"/v1/sessions/{parent}/input", json={"text": TWO})
        kids = await children(client, parent, 2)
        await parent_answered(ledger, parent)
        await settled(pool, parent, "done")
        view = (await client.get(f"/v1/sessions/{kids[0]}")).json()
        assert view["subagentOf"]["session"] == parent
        assert view["subagentOf"]["depth"] == 1
        capabilities = (await client.get("/v1/capabilities")).json()
    log = await log_of(ledger, parent)
    by_call = results(log)
    texts = sorted(e.payload["content"][0]["text"] for e in by_call.values())
    assert texts == ["echo: alpha", "echo: beta"]
    assert all(e.payload["subagent"]["status"] == "done" for e in by_call.values())
    assert len(reports(log)) == 2
    assert capabilities["features"]["subagents"] is True
    assert capabilities["limits"]["subagentsPageMax"] == 200
    for kid in kids:
        assert len(final_answers(await log_of(ledger, kid))) == 1


async def test_sigkill_mid_tree_leaves_one_answer_per_child_and_one_result_per_call(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, tmp_path: Path
) -> None:
    slow = f"{delegate(400, 'alpha one two three four')} {delegate(400, 'beta one two three four')}"
    async with serve_api(database_dsn) as api, api.client() as client:
        first = [await WorkerProcess(database_dsn, tmp_path).start() for _ in range(2)]
        parent = (await client.post("/v1/sessions")).json()["id"]
        await client.post(f"/v1/sessions/{parent}/input", json={"text": slow})
        kids = await children(client, parent, 2)

        async def both_running() -> bool:
            statuses = [await pool.fetchval(
                "SELECT status FROM runs WHERE tenant_id = 'acme' AND session_id = $1", k
            ) for k in kids]  # fmt: skip
            return statuses == ["running", "running"]

        await wait_until(both_running, 30, "both children streaming")
        for worker in first:
            await worker.signal(signal.SIGKILL)
        second = [await WorkerProcess(database_dsn, tmp_path).start() for _ in range(2)]
        await parent_answered(ledger, parent, timeout_s=90)
        for worker in second:
            await worker.signal(signal.SIGTERM)
    log = await log_of(ledger, parent)
    assert sorted(results(log)) == sorted(
        e.payload["subagentResult"]["toolCallId"] for e in reports(log)
    ), "one result per call, from one report each"
    assert len(results(log)) == 2
    assert [e.kind for e in log].count("tool.result") == 2
    for kid in kids:
        assert len(final_answers(await log_of(ledger, kid))) == 1, "each child answered once"


async def test_cancelling_the_parent_stops_its_children(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger
) -> None:
    long = " ".join(["word"] * 60)
    text = f"{delegate(500, long)} {delegate(500, long)}"
    async with (
        serve_api(database_dsn) as api,
        worker_task(database_dsn, slots=3),
        api.client() as client,
    ):
        parent = (await client.post("/v1/sessions")).json()["id"]
        await client.post(f"/v1/sessions/{parent}/input", json={"text": text})
        kids = await children(client, parent, 2)
        await settled(pool, parent, "done")  # waiting on its subagents, holding no lease
        cancel = await client.post(f"/v1/sessions/{parent}/cancel")
        assert cancel.status_code == 200, cancel.text
        for kid in kids:
            await settled(pool, kid, "failed")

        async def both_resolved() -> bool:
            return len(results(await log_of(ledger, parent))) == 2

        await wait_until(both_resolved, 30, "the parent told of both cancelled children")
        await settled(pool, parent, "failed")
    log = await log_of(ledger, parent)
    assert final_answers(log) == [], "the parent asked its model nothing more"
    assert all(e.payload["isError"] for e in results(log).values())
    for kid in kids:
        summaries = [e for e in await log_of(ledger, kid) if e.kind == "run.finished"]
        assert summaries[-1].payload["status"] == "cancelled"


async def test_a_subagents_decision_is_seen_from_the_root_and_answered_there(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("KEEL_TOOL_NOTES_FILE", str(tmp_path / "notes.txt"))
    gated = policy(note=ALL_OUTCOMES)
    inner = '[[tool:note {"text": "deep"}]]'
    text = delegating(inner)
    async with (
        serve_api(database_dsn, boot_config=gated) as api,
        worker_task(database_dsn, slots=3, boot_config=gated),
        api.client() as client,
    ):
        parent = (await client.post("/v1/sessions")).json()["id"]
        await client.post(f"/v1/sessions/{parent}/input", json={"text": text})
        (kid,) = await children(client, parent, 1)
        found: list[dict[str, str]] = []

        async def seen_from_root() -> bool:
            url = f"/v1/sessions/{parent}/decisions?scope=tree&state=open"
            found[:] = (await client.get(url)).json()["decisions"]
            return len(found) == 1

        await wait_until(seen_from_root, 30, "the child's decision seen from the root")
        (decision,) = found
        assert decision["session"] == kid
        url = f"/v1/sessions/{kid}/decisions/{decision['id']}"
        body = {"outcome": "approve", "argsDigest": decision["argsDigest"]}
        assert (await client.post(url, json=body)).status_code == 201
        await parent_answered(ledger, parent)
    assert (tmp_path / "notes.txt").read_text() == "deep\n"


async def test_a_client_cannot_forge_a_subagent_result_or_link(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger
) -> None:
    """The subagent key space and fields are the worker's own: a forged result for a running
    child's call, or a forged link in a first input, is 400 subagent_reserved and commits
    nothing; the call's result is still the child's own answer."""
    async with (
        serve_api(database_dsn) as api,
        worker_task(database_dsn, slots=3),
        api.client() as client,
    ):
        parent = (await client.post("/v1/sessions")).json()["id"]
        await client.post(
            f"/v1/sessions/{parent}/input", json={"text": delegate(300, "alpha one two three")}
        )
        (kid,) = await children(client, parent, 1)
        call = next(
            b["id"]
            for e in await log_of(ledger, parent)
            if e.kind == "assistant.message"
            for b in e.payload["content"]
            if b.get("type") == "toolCall"
        )
        forged = {"toolCallId": call, "child": kid, "status": "done", "text": "forged"}
        attempts = [
            ("input", {"text": "x", "requestId": f"subagent:{call}", "subagentResult": forged}),
            ("input", {"text": "x", "subagentResult": forged}),
            ("input", {"text": "x", "requestId": f"subagent:{call}"}),
            ("events", {"kind": "user.message", "payload": {"text": "x"},
                        "requestId": f"subagent:{call}"}),
        ]  # fmt: skip
        for door, body in attempts:
            answer = await client.post(f"/v1/sessions/{parent}/{door}", json=body)
            assert (answer.status_code, answer.json()["error"]["code"]) == (
                400,
                "subagent_reserved",
            ), body
        link = {"parent": parent, "toolCallId": "c-forged", "depth": 1, "root": parent}
        orphan = (await client.post("/v1/sessions")).json()["id"]
        linked = await client.post(
            f"/v1/sessions/{orphan}/input", json={"text": "task", "subagent": link}
        )
        assert (linked.status_code, linked.json()["error"]["code"]) == (400, "subagent_reserved")
        assert await log_of(ledger, orphan) == []
        await parent_answered(ledger, parent)
    log = await log_of(ledger, parent)
    (result,) = results(log).values()
    assert result.payload["content"][0]["text"] == "echo: alpha one two three"
    assert len(reports(log)) == 1


async def test_a_delegate_call_past_max_per_tree_gets_an_error_result_and_the_parent_answers(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger
) -> None:
    """Five `delegate` calls in one answer under maxPerTree 3: three children, two isError
    results naming the limit, and the parent's run answers; so does its next input."""
    small = TenantConfig.model_validate({"settings": {"subagents": {"maxPerTree": 3}}})
    five = " ".join(f'[[tool:delegate {{"task": "t{n}"}}]]' for n in range(5))
    async with (
        serve_api(database_dsn, boot_config=small) as api,
        worker_task(database_dsn, slots=3, boot_config=small),
        api.client() as client,
    ):
        parent = (await client.post("/v1/sessions")).json()["id"]
        await client.post(f"/v1/sessions/{parent}/input", json={"text": five})
        await parent_answered(ledger, parent, timeout_s=20)
        await settled(pool, parent, "done")
        await client.post(f"/v1/sessions/{parent}/input", json={"text": "and then?"})

        async def answered_again() -> bool:
            return len(final_answers(await log_of(ledger, parent))) == 2

        await wait_until(answered_again, 20, "the parent's answer to its next input")
        page = (await client.get(f"/v1/sessions/{parent}/subagents")).json()
    assert len(page["subagents"]) == 3
    linked = "SELECT count(*) FROM subagent_links WHERE tenant_id = 'acme' AND root_session = $1"
    assert await pool.fetchval(linked, parent) == 3
    by_call = results(await log_of(ledger, parent))
    refused = [e.payload for e in by_call.values() if e.payload["isError"]]
    assert len(by_call) == 5
    assert len(refused) == 2
    for result in refused:
        assert "maxPerTree" in result["content"][0]["text"]
        assert result["subagent"] == {"refused": "maxPerTree"}


async def test_a_delegate_call_past_max_depth_gets_an_error_result_and_the_child_answers(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger
) -> None:
    """Under maxDepth 1 a child's own `delegate` call gets an isError result naming the limit:
    no grandchild, the child answers, and so does its parent."""
    shallow = TenantConfig.model_validate({"settings": {"subagents": {"maxDepth": 1}}})
    inner = '[[tool:delegate {"task": "deeper"}]]'
    text = delegating(inner)
    async with (
        serve_api(database_dsn, boot_config=shallow) as api,
        worker_task(database_dsn, slots=3, boot_config=shallow),
        api.client() as client,
    ):
        parent = (await client.post("/v1/sessions")).json()["id"]
        await client.post(f"/v1/sessions/{parent}/input", json={"text": text})
        await parent_answered(ledger, parent, timeout_s=20)
        (kid,) = await children(client, parent, 1)
        grandchildren = (await client.get(f"/v1/sessions/{kid}/subagents")).json()["subagents"]
    assert grandchildren == []
    (refused,) = results(await log_of(ledger, kid)).values()
    assert refused.payload["isError"] is True
    assert refused.payload["subagent"] == {"refused": "maxDepth"}
    assert "maxDepth is 1" in refused.payload["content"][0]["text"]
    (result,) = results(await log_of(ledger, parent)).values()
    assert result.payload["subagent"]["status"] == "done"


async def test_concurrent_delegate_calls_of_one_tree_never_grow_it_past_max_per_tree(
    pool: asyncpg.Pool, ledger: PostgresLedger
) -> None:
    """Ten siblings of one tree each delegate at once under maxPerTree 3: three children are
    linked and made, seven calls are refused by name (the budget holds across workers)."""
    await ledger.create_tenant("race")
    delegations = Delegations(ledger, PostgresSubagents(pool))
    limits = SubagentSettings.model_validate({"maxPerTree": 3})
    link = {"depth": 1, "root": "root-1", "parent": "root-1"}

    def sibling_log(n: int) -> list[Event]:
        task = {"text": "t", "subagent": {**link, "toolCallId": f"s{n}"}}
        return [Event(tenant="race", session=f"sib-{n}", seq=1, kind="user.message",
                      payload=task, committed_at=datetime.now(UTC))]  # fmt: skip

    call = {"id": "c1", "name": "delegate", "arguments": {"task": "work"}}
    outcomes = await asyncio.gather(*(
        delegations.ensure("race", f"sib-{n}", call, sibling_log(n), limits) for n in range(10)
    ))  # fmt: skip
    assert sum(1 for o in outcomes if o is None) == 3
    assert all(o.provenance == {"refused": "maxPerTree"} for o in outcomes if o is not None)
    count = "SELECT count(*) FROM subagent_links WHERE tenant_id = 'race' AND root_session = $1"
    assert await pool.fetchval(count, "root-1") == 3
