"""A model server's Retry-After holds across attempts: when an attempt ends on a failure that
asked to wait, the run's next attempt (its next claim, by any worker) comes no sooner."""

from __future__ import annotations

import asyncpg

from keel_stream.kernel import CommitRequest
from keel_stream.retry import RetryPolicy
from keel_stream.store import PostgresLedger
from keel_stream.worker.providers import Finish, OpenAIProvider, ProviderRequest
from tests.support.chat_server import Fault, chat_server
from tests.support.workers import log_of, settled, worker_task

ASKED_S = 1.0
"""What the fake server's 429 asks for (whole seconds: Retry-After's own unit)."""


async def test_a_request_given_up_on_a_429_reports_the_wait_it_asked_for() -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(status=429, headers={"retry-after-ms": "1500"}))
        provider = OpenAIProvider(url, None, "local", retry=RetryPolicy(attempts=1))
        request = ProviderRequest("t", "s", "g1", [{"role": "user", "content": "hi"}])
        (finish,) = [e async for e in provider.stream(request)]
    assert isinstance(finish, Finish)
    assert (finish.stop_reason, finish.retry_after_s) == ("error", 1.5)


async def test_the_next_attempt_comes_no_sooner_than_the_retry_after_of_the_failed_one(
    ledger: PostgresLedger, pool: asyncpg.Pool, database_dsn: str, session: tuple[str, str]
) -> None:
    async with chat_server() as (url, server):
        server.faults.append(Fault(status=429, headers={"retry-after": f"{ASKED_S:.0f}"}))
        # One request per attempt: the 429 ends the first attempt at once.
        provider = OpenAIProvider(url, "sk-test", "local", retry=RetryPolicy(attempts=1))
        async with worker_task(database_dsn, provider=provider):
            await ledger.commit(
                CommitRequest(
                    tenant_id="acme", session_id="s1", kind="user.message", payload={"text": "hi"}
                )
            )
            await settled(pool, "s1", "done")
    summaries = [e.payload for e in await log_of(ledger, "s1") if e.kind == "run.finished"]
    assert [s["status"] for s in summaries] == ["failed", "done"]
    assert "HTTP 429" in summaries[0]["error"]
    failed_at, next_at = server.arrivals[:2]
    assert len(server.arrivals) == 2
    assert next_at - failed_at >= ASKED_S, (
        f"the next attempt asked {next_at - failed_at:.3f}s after a 429 that asked for {ASKED_S}s"
    )
