"""`keel-stream dev` over its life, run as a user runs it: one per data directory, found by the
other commands, restarted after a SIGKILL with nothing of the first run left and the read models
resuming at valid offsets, and stopped completely by a SIGTERM to its whole process group.

The tests share one data directory and the dev running on it (starting one when none runs), so
the file starts dev twice in all; every process any of them started is killed at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from keel_stream.dev.postgres import stop_postmaster
from keel_stream.dev.procs import Proc, wait_gone
from keel_stream.topics.catalog import EVENTS
from tests.support.cli import KEEL, one_line_error
from tests.support.cli import run_keel_sync as keel

API_KEY = "lifecycle-key"
READY_S = 120.0


def wait_for(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """Poll check until it returns something truthy; fail naming what did not happen."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


@dataclass
class DevRun:
    """One `keel-stream dev` process, in a session of its own (so its group can be signalled)."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def lines(self) -> list[str]:
        return self.out.read_text(errors="replace").splitlines()

    def ready(self) -> bool:
        if any(line.startswith("ready") for line in self.lines()):
            return True
        assert self.proc.poll() is None, f"dev exited: {self.out.read_text()}{self.err.read_text()}"
        return False

    def line(self, prefix: str) -> str:
        (found,) = [line for line in self.lines() if line.startswith(prefix)]
        return found.removeprefix(prefix).strip()

    @property
    def api_url(self) -> str:
        return self.line("api: ")


@dataclass
class Devs:
    """The data directory under test and every dev started on it."""

    data_dir: Path
    logs: Path
    runs: list[DevRun] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("KEEL_DATABASE_URL", "KEEL_KAFKA_BOOTSTRAP", "KEEL_DEV_API_KEY")
        }
        env.update(KEEL_DATA_DIR=str(self.data_dir), KEEL_API_PORT="0", KEEL_DEV_API_KEY=API_KEY)
        return env

    def start(self) -> DevRun:
        n = len(self.runs)
        out, err = self.logs / f"dev{n}.out", self.logs / f"dev{n}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            proc = subprocess.Popen(
                [*KEEL, "dev"], stdout=stdout, stderr=stderr, env=self.env, start_new_session=True
            )
        run = DevRun(proc, out, err)
        self.runs.append(run)
        wait_for(run.ready, READY_S, "dev to say ready")
        return run

    def running(self) -> DevRun:
        """The dev running now, started if none is."""
        if self.runs and self.runs[-1].proc.poll() is None:
            return self.runs[-1]
        return self.start()

    def recorded(self) -> dict[str, Proc]:
        """The processes the running dev recorded (dev.pids.json)."""
        entries = json.loads((self.data_dir / "dev.pids.json").read_text())
        return {name: Proc(e["pid"], e["start_ticks"]) for name, e in entries.items()}

    def addresses(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads((self.data_dir / "dev.json").read_text())
        return result

    def kill_everything(self) -> None:
        leftovers: list[Proc] = []
        with contextlib.suppress(OSError, ValueError, KeyError):
            leftovers += self.recorded().values()
        for run in self.runs:
            if run.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.wait()
        pid_file = self.data_dir / "postgres" / "postmaster.pid"
        with contextlib.suppress(OSError, ValueError):
            postmaster = Proc.of(int(pid_file.read_text().split("\n", 1)[0]))
            if postmaster is not None:
                stop_postmaster(postmaster, fast_s=10)
        for proc in leftovers:
            proc.signal(signal.SIGKILL)
        wait_gone(leftovers, 10)


@pytest.fixture(scope="module")
def devs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Devs]:
    # Not under pytest's own temporary root: a pytest session starting meanwhile makes that
    # 0700 again, and as root the embedded PostgreSQL runs as a user of its own that must reach
    # its data directory.
    data = Path(tempfile.mkdtemp(prefix="keel-dev-lifecycle-"))
    state = Devs(data / "keel", tmp_path_factory.mktemp("dev-lifecycle"))
    try:
        yield state
    finally:
        state.kill_everything()
        shutil.rmtree(data, ignore_errors=True)


def api(run: DevRun) -> httpx.Client:
    return httpx.Client(
        base_url=run.api_url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=30
    )


def test_a_second_dev_on_a_live_data_dir_refuses_naming_the_first(devs: Devs) -> None:
    first = devs.running()
    before = devs.recorded()
    result = subprocess.run(
        [*KEEL, "dev"], capture_output=True, text=True, env=devs.env, timeout=60, check=False
    )
    message = one_line_error(result, "dev_already_running", 1)
    assert f"pid {first.proc.pid}" in message
    assert devs.recorded() == before, "the refused dev must not have started anything"
    assert all(proc.alive() for proc in before.values())


def test_commands_use_the_running_devs_addresses(devs: Devs) -> None:
    devs.running()
    env = devs.env  # neither KEEL_DATABASE_URL nor KEEL_KAFKA_BOOTSTRAP
    created = keel("tenants", "create", "lifecycle", env=env)
    assert created.returncode == 0, created.stderr
    status = keel("projections", "status", env=env)  # needs the database and the broker
    assert status.returncode == 0, status.stderr
    assert "transcript" in status.stdout


async def stored_offsets(dsn: str) -> int:
    """The sum of the live transcript's next offsets on the events topic."""
    conn = await asyncpg.connect(dsn)
    try:
        total = await conn.fetchval(
            "SELECT coalesce(sum(o.next_offset), 0) FROM projection_offsets o "
            "JOIN projection_generations g USING (projection, generation) "
            "WHERE o.projection = 'transcript' AND g.status = 'live' AND o.topic = $1",
            EVENTS.full_name(),
        )
        return int(total)
    finally:
        await conn.close()


async def ledger_size(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        return int(await conn.fetchval("SELECT count(*) FROM events"))
    finally:
        await conn.close()


def offsets_past_the_ledger(devs: Devs, run: DevRun) -> str:
    """Leave stored offsets that a fresh topic holding the ledger once cannot reach: a session
    with a finished run, republished (the topic then holds every event twice), and the projector
    past both copies. Return the session."""
    with api(run) as client:
        session = client.post("/v1/sessions").json()["id"]
        client.post(f"/v1/sessions/{session}/input", json={"text": "one"}).raise_for_status()

        def finished() -> int | None:
            events = client.get(f"/v1/sessions/{session}/events").json()["events"]
            kinds = [e["kind"] for e in events]
            return events[-1]["seq"] if "run.finished" in kinds else None

        last = wait_for(finished, 30, "the fake provider's run to finish")
        read = client.get(f"/v1/sessions/{session}/transcript", params={"min_seq": last})
        assert read.status_code == 200, read.text
    republished = keel("republish", env=devs.env)
    assert republished.returncode == 0, republished.stderr
    dsn = devs.addresses()["database_url"]
    events = asyncio.run(ledger_size(dsn))
    wait_for(
        lambda: asyncio.run(stored_offsets(dsn)) >= 2 * events,
        30,
        "the projector to store offsets past the republished events",
    )
    return str(session)


def test_a_dev_restarted_after_sigkill_leaves_nothing_of_the_first_and_reads_at_once(
    devs: Devs,
) -> None:
    first = devs.running()
    session = offsets_past_the_ledger(devs, first)
    recorded = devs.recorded()
    assert set(recorded) == {"dev", "postgres", "broker", "projector"}
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    children = [recorded["broker"], recorded["projector"]]
    assert wait_gone(children, 10) == [], "the broker and the projector must die with dev"

    second = devs.start()
    assert [name for name, proc in recorded.items() if proc.alive()] == []
    with api(second) as client:  # the same session: its partition's stored offset was past the end
        seq = client.post(f"/v1/sessions/{session}/input", json={"text": "two"}).json()["seq"]
        read = client.get(
            f"/v1/sessions/{session}/transcript", params={"min_seq": seq, "wait_s": 1}
        )
    assert read.status_code == 200, read.text


def test_sigterm_to_the_process_group_stops_postgres(devs: Devs) -> None:
    dev = devs.running()
    postmaster = devs.recorded()["postgres"]
    assert postmaster.alive()
    os.killpg(dev.proc.pid, signal.SIGTERM)
    assert dev.proc.wait(timeout=90) == 0, dev.err.read_text()
    assert not postmaster.alive(), "PostgreSQL must be gone when dev has exited"
    assert not (devs.data_dir / "postgres" / "postmaster.pid").exists()
    assert not (devs.data_dir / "dev.json").exists()
    assert not (devs.data_dir / "dev.pids.json").exists()
    without_dev = keel("tenants", "create", "late", env=devs.env)
    one_line_error(without_dev, "missing_database_url", 2)
