"""Workers in-process (tasks) and as real processes (to SIGKILL / SIGTERM them)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import asyncpg

from keel_stream.dev.components import worker_config
from keel_stream.kernel import Event
from keel_stream.settings import KeelSettings
from keel_stream.store import PostgresLedger
from keel_stream.worker.worker import Worker, WorkerConfig
from tests.support.wait import wait_until

FAST = {"lease_ttl_s": 1.5, "poll_s": 0.1, "drain_grace_s": 2.0}


@contextlib.asynccontextmanager
async def worker_task(database_url: str, **options: Any) -> AsyncIterator[WorkerConfig]:
    # The test is this worker's edge: its KEEL_* environment, as `keel-stream worker` reads it.
    made = worker_config(KeelSettings(), database_url, None, os.environ)
    edge = {
        "provider": made.provider,
        "model_providers": made.model_providers,
        "tool_limits": made.tool_limits,
        "builtins": made.builtins,
        "environ": os.environ,
    }
    config = replace(WorkerConfig(database_url=database_url), **{**edge, **FAST, **options})
    stop = asyncio.Event()
    task = asyncio.create_task(Worker(config).run(stop))
    try:
        yield config
    finally:
        stop.set()
        await asyncio.wait_for(task, 60)


class WorkerProcess:
    """`keel-stream worker` as a child process; its log goes to a file."""

    def __init__(self, database_url: str, log_dir: Path, **env: str) -> None:
        self._env = {
            **os.environ,
            "KEEL_DATABASE_URL": database_url,
            "KEEL_WORKER_LEASE_TTL_S": "1.5",
            **env,
        }
        self.log = log_dir / f"worker-{os.urandom(3).hex()}.log"
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> WorkerProcess:
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "keel_stream", "worker", env=self._env,
                stdout=log, stderr=log,
            )  # fmt: skip
        return self

    async def signal(self, sig: signal.Signals) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(sig)
            await asyncio.wait_for(self.process.wait(), 60)
        assert self.process.returncode is not None
        return self.process.returncode


async def run_status(pool: asyncpg.Pool, session: str) -> str | None:
    status = await pool.fetchval(
        "SELECT status FROM runs WHERE tenant_id = 'acme' AND session_id = $1", session
    )
    return None if status is None else str(status)


async def settled(pool: asyncpg.Pool, session: str, *statuses: str, timeout_s: float = 60) -> None:
    async def done() -> bool:
        return await run_status(pool, session) in statuses

    await wait_until(done, timeout_s, f"the run of {session} to settle as {statuses}")


async def log_of(ledger: PostgresLedger, session: str) -> list[Event]:
    return await ledger.read_events("acme", session, after=0, limit=1000)


async def has_event(ledger: PostgresLedger, session: str, predicate: Any) -> bool:
    return any(predicate(e) for e in await log_of(ledger, session))


async def tool_call_committed(ledger: PostgresLedger, session: str, timeout_s: float = 30) -> None:
    """Wait until the session's log holds an answer that asked for tools."""

    async def committed() -> bool:
        return await has_event(ledger, session, lambda e: e.payload.get("stopReason") == "tool_use")

    await wait_until(committed, timeout_s, f"a tool call committed in {session}")


class RecordingProvider:
    """The fake provider, keeping every request it was given (to compare with the log)."""

    def __init__(self, inner: Any = None) -> None:
        from keel_stream.worker.providers.fake import FakeProvider

        self.inner = inner if inner is not None else FakeProvider()
        self.name = self.inner.name
        self.model = self.inner.model
        self.requests: list[Any] = []
        self.summarised: list[list[Any]] = []
        self.deltas = 0
        """Text deltas the loop has been given so far."""

    def stream(self, request: Any) -> Any:
        self.requests.append(request)
        return self._counted(self.inner.stream(request))

    async def _counted(self, stream: AsyncIterator[Any]) -> AsyncIterator[Any]:
        from keel_stream.worker.providers.base import TextDelta

        async for item in stream:
            if isinstance(item, TextDelta):
                self.deltas += 1
            yield item

    async def summarize(self, messages: Any) -> str:
        self.summarised.append(list(messages))
        return str(await self.inner.summarize(messages))


async def assert_one_summary_per_attempt(
    pool: asyncpg.Pool, ledger: PostgresLedger, released: set[tuple[str, int]]
) -> int:
    """Every attempt of every settled run left exactly one run.finished; returns how many runs
    were checked. A summary records the epoch it was committed under, and a takeover's summary
    of the attempt that died names that attempt's epoch (abandonedEpoch); the takeover's own
    claim ran no attempt. Released (drained) attempts are not settled and have no summary."""
    rows = await pool.fetch(
        "SELECT tenant_id, session_id, lease_epoch FROM runs WHERE status IN ('done', 'failed')"
    )
    for row in rows:
        session = row["session_id"]
        events = await ledger.read_events(row["tenant_id"], session, after=0, limit=1000)
        described: list[int] = []
        settling: set[int] = set()
        for event in events:
            if event.kind != "run.finished":
                continue
            if "abandonedEpoch" in event.payload:
                described.append(event.payload["abandonedEpoch"])
                settling.add(event.payload["epoch"])
            else:
                described.append(event.payload["epoch"])
        mine = {e for s, e in released if s == session}
        assert len(described) == len(set(described)), f"{session}: two summaries of one attempt"
        assert not set(described) & mine, f"{session}: a released attempt was summarised"
        epochs = set(range(1, row["lease_epoch"] + 1))
        assert set(described) | settling | mine == epochs, (session, described, settling, mine)
    return len(rows)
