"""`keel-stream dev` over its life, run as a user runs it: one per data directory, found by the
other commands, restarted after a SIGKILL with nothing of the first run left and the read models
resuming at valid offsets, and stopped completely by a SIGTERM to its whole process group.

The tests share one data directory and the dev running on it (starting one when none runs), so
the file starts dev twice in all; every process any of them started is killed at the end.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest

from keel_stream.procs import wait_gone
from keel_stream.topics.catalog import EVENTS
from tests.support.cli import KEEL, one_line_error
from tests.support.cli import run_keel_sync as keel
from tests.support.dev_runs import DevRun, Devs, wait_for

SERVICES = {"projector", "relay", "worker", "hooks", "triggers", "api"}


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


def test_dev_reports_hooks_and_triggers_once_its_hooks_and_triggers_children_run(
    devs: Devs,
) -> None:
    run = devs.running()
    with run.client() as client:

        def both_running() -> bool:
            features = client.get("/v1/capabilities").json()["features"]
            return bool(features["hooks"] and features["triggers"])

        wait_for(both_running, 60, "hooks and triggers once dev's children beat")
        ready = client.get("/readyz")
    deps = ready.json()["dependencies"]
    assert (deps["hooksSender"]["status"], deps["triggerScheduler"]["status"]) == (
        "running",
        "running",
    )


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
    with run.client() as client:
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
    assert set(recorded) == {"dev", "postgres", "broker", *SERVICES}
    os.kill(first.proc.pid, signal.SIGKILL)
    first.proc.wait()
    children = [recorded[name] for name in ("broker", *SERVICES)]
    assert wait_gone(children, 10) == [], "the broker and the services must die with dev"

    second = devs.start()
    assert [name for name, proc in recorded.items() if proc.alive()] == []
    # The same session: its partition's stored offset was past the end.
    with second.client() as client:
        seq = client.post(f"/v1/sessions/{session}/input", json={"text": "two"}).json()["seq"]
        read = client.get(
            f"/v1/sessions/{session}/transcript", params={"min_seq": seq, "wait_s": 1}
        )
    assert read.status_code == 200, read.text


def test_sigterm_to_the_process_group_stops_postgres(devs: Devs) -> None:
    dev = devs.running()
    recorded = devs.recorded()
    postmaster = recorded["postgres"]
    assert postmaster.alive()
    os.killpg(dev.proc.pid, signal.SIGTERM)  # the services get it too, as from a service manager
    assert dev.proc.wait(timeout=90) == 0, dev.err.read_text()
    assert not postmaster.alive(), "PostgreSQL must be gone when dev has exited"
    assert [name for name, proc in recorded.items() if proc.alive()] == []
    assert dev.logged("service exited unexpectedly; restarting it") == []
    assert dev.logged("server exited unexpectedly; restarting it") == []
    assert not (devs.data_dir / "postgres" / "postmaster.pid").exists()
    assert not (devs.data_dir / "dev.json").exists()
    assert not (devs.data_dir / "dev.pids.json").exists()
    without_dev = keel("tenants", "create", "late", env=devs.env)
    one_line_error(without_dev, "missing_database_url", 2)
