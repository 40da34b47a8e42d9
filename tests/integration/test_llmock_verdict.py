"""The worker against llmock (PyPI), a chaos OpenAI-compatible server that judges how its client
retries: random 429s and 503s (each asking to wait 1 s), streams cut short or dropped, tool
calls in auto mode. Its verdict must pass: no retry before a Retry-After elapsed, no retry of
what cannot succeed, no truncated stream taken for an answer, no retry storm."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import asyncpg
import httpx

from keel_stream.kernel import CommitRequest
from keel_stream.store import PostgresLedger
from keel_stream.worker.providers import OpenAIProvider
from tests.support.wait import wait_until
from tests.support.workers import log_of, settled, worker_task

CHAOS: Final = (
    "--error-rate", "429=0.15", "--error-rate", "503=0.1",
    "--stream-fault", "truncate=0.05", "--stream-fault", "disconnect=0.05",
    "--tool-mode", "auto",
)  # fmt: skip
SESSIONS: Final = 8


@contextlib.asynccontextmanager
async def llmock(log: Path) -> AsyncIterator[httpx.AsyncClient]:
    """`llmock serve` with the chaos switches on a free port; yields a client of its root."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    argv = ["-m", "llmock.cli", "serve", "--host", "127.0.0.1", "--port", str(port), *CHAOS]
    with log.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, *argv, stdout=out, stderr=out
        )
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:

        async def answers() -> bool:
            if process.returncode is not None:
                raise RuntimeError(f"llmock exited ({process.returncode}): see {log}")
            with contextlib.suppress(httpx.TransportError):
                return (await client.get("/_llmock/scenario")).is_success
            return False

        try:
            await wait_until(answers, 30, "llmock to serve")
            yield client
        finally:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            await asyncio.wait_for(process.wait(), 30)


async def say(ledger: PostgresLedger, session: str) -> None:
    await ledger.create_session("acme", session)
    # Each session its own text: llmock groups requests with the same body as one call's retries.
    text = f"echo the word {session} back to me"
    await ledger.commit(
        CommitRequest(
            tenant_id="acme", session_id=session, kind="user.message", payload={"text": text}
        )
    )


async def test_llmock_judges_the_worker_resilient_under_chaos(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    tmp_path: Path,
) -> None:
    await ledger.create_tenant("acme")
    async with llmock(tmp_path / "llmock.log") as admin:
        # The first call's four requests (all the provider makes in one attempt) are 429s
        # asking for 1 s: the attempt fails, and the next one must wait that second out too.
        rate_limited = {"type": "fail", "status": 429, "retry_after": 1, "times": 4}
        scripted = await admin.post("/_llmock/scenario", json={"behaviors": [rate_limited]})
        scripted.raise_for_status()
        base_url = str(admin.base_url).rstrip("/") + "/v1"
        provider = OpenAIProvider(base_url, "sk-test", "gpt-4o-mini")
        async with worker_task(database_dsn, provider=provider):
            await say(ledger, "first")
            await settled(pool, "first", "done", "failed")
            for index in range(SESSIONS):
                await say(ledger, f"chaos-{index}")
            for index in range(SESSIONS):
                await settled(pool, f"chaos-{index}", "done", "failed")
        verdict: dict[str, Any] = (await admin.get("/_llmock/verdict")).json()
    assert verdict["passed"], json.dumps(verdict["findings"], indent=1)
    summaries = [e.payload for e in await log_of(ledger, "first") if e.kind == "run.finished"]
    assert "HTTP 429" in summaries[0]["error"], "the first attempt ended on the scripted 429s"
    assert verdict["faults_injected"] >= 4, verdict
