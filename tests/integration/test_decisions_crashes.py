"""Decisions survive SIGKILL at every step: worker processes killed after the gated answer is
committed (while an ungated sibling runs), while the session waits, and while the resumed
run streams its answer. No tool runs twice, no answer is lost."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import asyncpg

from keel_stream.store import PostgresLedger
from tests.support.api import serve_api
from tests.support.decisions import final_answers, log_of, open_decisions, results
from tests.support.wait import wait_until
from tests.support.workers import WorkerProcess, run_status, settled, tool_call_committed

POLICY = {
    "policy": {
        "tools": {
            "note": {
                "approval": {"when": [{"argument": "/text", "equals": "deploy"}]},
                "outcomes": ["approve", "reject"],
            }
        }
    }
}
INPUT = (
    '[[tool:note {"text": "deploy"}]] [[tool:note {"text": "sibling", "sleep_ms": 2000}]] '
    "[[slow:1000]]"
)


async def test_no_tool_runs_twice_and_no_answer_is_lost_under_sigkill(
    database_dsn: str, pool: asyncpg.Pool, ledger: PostgresLedger, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(POLICY))
    notes = tmp_path / "notes.txt"
    env = {"KEEL_EXTERNAL_CONFIG": str(config), "KEEL_TOOL_NOTES_FILE": str(notes)}

    def worker() -> WorkerProcess:
        return WorkerProcess(database_dsn, tmp_path, **env)

    def noted() -> list[str]:
        return notes.read_text().splitlines() if notes.exists() else []

    async with serve_api(database_dsn) as api, api.client() as client:
        sid = (await client.post("/v1/sessions")).json()["id"]
        first = await worker().start()
        await client.post(f"/v1/sessions/{sid}/input", json={"text": INPUT})
        await tool_call_committed(ledger, sid)
        await first.signal(signal.SIGKILL)  # the ungated sibling is still sleeping
        assert noted() == []

        second = await worker().start()
        (decision,) = await open_decisions(client, sid, 1)
        await settled(pool, sid, "done")
        assert noted() == ["sibling"], "the sibling ran once, in the worker that took over"
        await second.signal(signal.SIGKILL)  # a worker dies while the session waits

        url = f"/v1/sessions/{sid}/decisions/{decision['id']}"
        body = {"outcome": "approve", "argsDigest": decision["argsDigest"]}
        assert (await client.post(url, json=body)).status_code == 201
        assert await run_status(pool, sid) == "pending", "the answer made the session owe a run"

        third = await worker().start()

        async def tool_ran() -> bool:
            return decision["id"] in results(await log_of(ledger, sid))

        await wait_until(tool_ran, 30, "the approved tool's result")
        await third.signal(signal.SIGKILL)  # while the final answer streams, word by word

        fourth = await worker().start()

        async def answered() -> bool:
            return len(final_answers(await log_of(ledger, sid))) == 1

        await wait_until(answered, 60, "the final answer after the takeover")
        await settled(pool, sid, "done")
        await fourth.signal(signal.SIGTERM)
    log = await log_of(ledger, sid)
    assert noted() == ["sibling", "deploy"], "each tool ran exactly once"
    assert sorted(results(log)) == sorted([decision["id"], f"{decision['id']}-2"])
    assert [e.kind for e in log].count("tool.result") == 2
    answers = [e for e in log if e.kind == "user.message" and "decision" in e.payload]
    assert len(answers) == 1
