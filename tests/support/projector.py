"""The projector as a real Faust worker process, and checks of its read models."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg

from keel_stream.kernel.types import Event
from keel_stream.projections import ALL, fold
from keel_stream.store.projection_rows import TRANSCRIPT, read_transcripts

_SESSIONS = "SELECT tenant_id, session_id FROM sessions"


@dataclass
class Assignment:
    """The source partitions a projector was assigned, and per partition the offset of the
    first record it consumed after that."""

    partitions: set[int]
    first: dict[int, int]


class ProjectorProcess:
    """`keel-stream projections run` as a child process; its log goes to a file."""

    def __init__(
        self, database_url: str, bootstrap: str, prefix: str, data_dir: Path, **env: str
    ) -> None:
        self._env = {
            **os.environ,
            "KEEL_DATABASE_URL": database_url,
            "KEEL_KAFKA_BOOTSTRAP": bootstrap,
            "KEEL_TOPIC_PREFIX": prefix,
            "KEEL_DATA_DIR": str(data_dir),
            "KEEL_PROJECTOR_RECONCILE_EVERY_S": "0.5",
            "KEEL_PROJECTOR_RECONCILE_IDLE_S": "0.5",
            "KEEL_PROJECTOR_BATCH_SIZE": "200",
            **env,
        }
        self.log = data_dir / f"projector-{os.urandom(3).hex()}.log"
        self.process: asyncio.subprocess.Process | None = None

    async def start(self) -> ProjectorProcess:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "keel_stream", "projections", "run",
                env=self._env, stdout=log, stderr=log,
            )  # fmt: skip
        return self

    def assignments(self) -> list[Assignment]:
        """Every assignment so far, in order, each with the first records consumed after it
        (the same partitions announced twice in a row, with no record between, count once)."""
        found: list[Assignment] = []
        for line in self.log.read_text().splitlines():
            if '"first record"' not in line and "resumed from stored" not in line:
                continue
            with contextlib.suppress(ValueError):
                entry = json.loads(line[line.index("{") :])
                if entry.get("event") == "resumed from stored offsets":
                    partitions = set(entry.get("partitions", ()))
                    # A rebalance may announce the same assignment twice before any record:
                    # that is one assignment, whose first records follow the second line.
                    if not (found and found[-1].partitions == partitions and not found[-1].first):
                        found.append(Assignment(partitions, {}))
                elif entry.get("event") == "first record" and found:
                    found[-1].first.setdefault(int(entry["partition"]), int(entry["offset"]))
        return found

    def first_records(self) -> dict[int, int]:
        """Per partition, the offset of the first record consumed after the last assignment."""
        assignments = self.assignments()
        return assignments[-1].first if assignments else {}

    def assigned(self) -> set[int] | None:
        """The source partitions of the last assignment (None before the first)."""
        assignments = self.assignments()
        return assignments[-1].partitions if assignments else None

    async def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        assert self.process is not None
        if self.process.returncode is None:
            self.process.send_signal(sig)
            await asyncio.wait_for(self.process.wait(), 60)
        assert self.process.returncode is not None
        return self.process.returncode


@contextlib.asynccontextmanager
async def projector(
    database_url: str, bootstrap: str, prefix: str, data_dir: Path, **env: str
) -> AsyncIterator[ProjectorProcess]:
    process = await ProjectorProcess(database_url, bootstrap, prefix, data_dir, **env).start()
    try:
        yield process
    finally:
        await process.stop(signal.SIGKILL)


async def ledger_events(pool: asyncpg.Pool) -> dict[tuple[str, str], list[Event]]:
    rows = await pool.fetch(
        "SELECT tenant_id, session_id, seq, kind, payload, committed_at FROM events"
        " ORDER BY tenant_id, session_id, seq"
    )
    grouped: dict[tuple[str, str], list[Event]] = {}
    for r in rows:
        key = (r["tenant_id"], r["session_id"])
        grouped.setdefault(key, []).append(
            Event.trusted(key[0], key[1], r["seq"], r["kind"], r["payload"], r["committed_at"])
        )
    return grouped


async def live_states(pool: asyncpg.Pool, projection: str) -> dict[tuple[str, str], Any]:
    if projection == TRANSCRIPT:  # rows and a head, assembled as the readers read it
        keys = [(r["tenant_id"], r["session_id"]) for r in await pool.fetch(_SESSIONS)]
        return await read_transcripts(pool, projection, keys)
    rows = await pool.fetch(
        "SELECT p.tenant_id, p.session_id, p.last_seq, p.state FROM projection_states p"
        " JOIN projection_generations g USING (projection, generation)"
        " WHERE g.status = 'live' AND p.projection = $1",
        projection,
    )
    return {(r["tenant_id"], r["session_id"]): (r["last_seq"], r["state"]) for r in rows}


async def models_equal_ledger_fold(pool: asyncpg.Pool) -> bool:
    """Every live read model of every session equals a direct fold over its ledger."""
    ledger = await ledger_events(pool)
    for projection in ALL:
        states = await live_states(pool, projection.name)
        for key, events in ledger.items():
            expected = fold(projection, events)
            if states.get(key) != (expected.last_seq, projection.dump(expected.state)):
                return False
    return True


async def stored_offsets(pool: asyncpg.Pool) -> dict[int, int]:
    """Per partition, the lowest next offset stored by any live projection."""
    rows = await pool.fetch(
        "SELECT o.partition, min(o.next_offset) AS next_offset FROM projection_offsets o"
        " JOIN projection_generations g USING (projection, generation)"
        " WHERE g.status = 'live' GROUP BY o.partition"
    )
    return {r["partition"]: r["next_offset"] for r in rows}
