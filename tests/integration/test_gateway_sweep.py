"""Budgets applied at spawn and audited; pidfiles, and the sweep that reclaims what a SIGKILLed
runtime left (the seed's two known gaps), with the pid-reuse rule."""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from keel_stream.errors import BudgetRefused
from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.pidfiles import PidRegistry, read_record, sweep, sweep_data_dir
from keel_stream.gateway.protocol import ProviderKind
from keel_stream.gateway.transport import StdioTransport
from keel_stream.procs import group_members, proc_stat
from keel_stream.tenancy.document import Budget

ROOT = Path(__file__).resolve().parents[2]
SIDECAR = [sys.executable, "-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent"]
SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
SECRET = "s3cret-value-never-logged"
DEADLINE_S = 20.0


def _wait(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_S}s: {what}")
        time.sleep(0.05)


def _limit(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith(name):
            return line[len(name) :].split()[0]
    raise AssertionError(f"no {name} in /proc/{pid}/limits")


def _alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat.state != "Z"


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[str]]]:
    """Processes a test starts in a session of their own; each group is killed at the end."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        for stat in group_members(process.pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(stat.pid, signal.SIGKILL)
        process.kill()
        process.wait(DEADLINE_S)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture
def sidecar_groups() -> Iterator[list[int]]:
    """Process groups of sidecars a dead runtime left; killed at the end whatever happened."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        for stat in group_members(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(stat.pid, signal.SIGKILL)


def _start(spawned: list[subprocess.Popen[str]], command: list[str]) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    spawned.append(process)
    return process


async def test_a_budget_is_applied_at_spawn_and_the_audit_holds_no_secret(
    tmp_path: Path,
) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    registry = PidRegistry(tmp_path / "pids")
    budget = Budget.model_validate({"openFiles": 64, "addressSpaceMb": 4096, "cpuSeconds": 60})
    transport = StdioTransport(
        SIDECAR,
        {"PATH": os.environ["PATH"], "TOKEN": SECRET},
        cwd=str(ROOT),
        name="ref",
        kind="agent",
        budget=budget,
        declared_env={"TOKEN": "secret:TOKEN"},
        audit=audit,
        registry=registry,
    )
    client = GatewayClient(transport, ProviderKind.AGENT, timeout_s=DEADLINE_S)
    await client.start()
    try:
        await client.initialize()
        pid = transport.pgid
        assert pid is not None
        assert _limit(pid, "Max open files") == "64"
        assert _limit(pid, "Max address space") == str(4096 * 1024 * 1024)
        assert _limit(pid, "Max cpu time") == "60"
        record = read_record(registry.path(pid))
        assert record is not None
        assert (record.pgid, record.runtime_pid, record.provider) == (pid, os.getpid(), "ref")
    finally:
        await client.aclose()
    assert not registry.path(pid).exists(), "a clean reclaim removes its pidfile"
    (spawned,) = audit.records("provider.spawned")
    assert (spawned["name"], spawned["kind"], spawned["pgid"]) == ("ref", "agent", pid)
    assert spawned["env"] == {"PATH": os.environ["PATH"], "TOKEN": "secret:TOKEN"}
    assert spawned["budget"] == {"openFiles": 64, "addressSpaceMb": 4096, "cpuSeconds": 60}
    (reclaimed,) = audit.records("provider.reclaimed")
    assert reclaimed["leftover"] == 0
    assert reclaimed["how"] in ("exited", "sigterm", "sigkill")
    assert SECRET not in audit.path.read_text()


async def test_a_budget_above_the_hard_limit_refuses_activation_and_is_audited(
    tmp_path: Path,
) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    budget = Budget.model_validate({"openFiles": hard + 1})
    transport = StdioTransport(SIDECAR, {"PATH": os.environ["PATH"]}, budget=budget, audit=audit)
    with pytest.raises(BudgetRefused) as caught:
        await transport.start(GatewayClient(transport, ProviderKind.AGENT))
    assert caught.value.code == "backend_budget_refused"
    assert transport.process is None, "nothing was spawned"
    (refused,) = audit.records("provider.budget_refused")
    assert refused["refused"] == [{"limit": "openFiles", "requested": hard + 1, "hardLimit": hard}]
    assert not audit.records("provider.spawned")


@pytest.mark.parametrize("obeys_eof", [False, True], ids=["ignores-eof", "exits-on-eof"])
def test_the_sweep_reclaims_the_groups_of_a_sigkilled_runtime(
    tmp_path: Path,
    spawned: list[subprocess.Popen[str]],
    sidecar_groups: list[int],
    obeys_eof: bool,
) -> None:
    switches = [] if obeys_eof else ["--ignore-stdin-eof"]
    command = [sys.executable, "-m", "tests.support.gateway_runtime", str(tmp_path), *switches]
    runtime = _start(spawned, command)
    assert runtime.stdout is not None
    pgid = int(runtime.stdout.readline())
    sidecar_groups.append(pgid)
    _wait(lambda: len(group_members(pgid)) == 3, "the sidecar and its 2 grandchildren")
    runtime.send_signal(signal.SIGKILL)
    runtime.wait(DEADLINE_S)
    if obeys_eof:  # the sidecar sees stdin EOF and leaves; its grandchildren stay
        _wait(lambda: not _alive(pgid), "the sidecar to exit on stdin EOF")
    members = {stat.pid for stat in group_members(pgid)}
    assert len(members) == (2 if obeys_eof else 3), "the gap: nothing reclaimed them"
    assert (pgid in members) is not obeys_eof

    report = sweep_data_dir(tmp_path, grace_s=2.0)

    assert (report.groups_killed, report.processes_killed) == (1, len(members))
    assert set(report.killed) == members
    _wait(lambda: not group_members(pgid), f"no process left in group {pgid}")
    assert not list((tmp_path / "gateway" / "pids").glob("*.json"))
    audit = AuditLog.in_data_dir(tmp_path)
    (killed,) = audit.records("sweep.killed")
    assert (killed["pgid"], killed["leftover"], killed["name"]) == (pgid, 0, "ref")
    assert audit.records("provider.spawned")[0]["pgid"] == pgid


def _pidfile(directory: Path, pid: int, start: int, runtime_pid: int, runtime_start: int) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    record = {
        "pid": pid,
        "pgid": pid,
        "start_ticks": start,
        "runtime_pid": runtime_pid,
        "runtime_start_ticks": runtime_start,
        "provider": "old",
        "command": ["old-sidecar"],
    }
    path = directory / f"{pid}.json"
    path.write_bytes(orjson.dumps(record))
    return path


def _sleeper(spawned: list[subprocess.Popen[str]]) -> tuple[int, int]:
    pid = _start(spawned, SLEEPER).pid
    _wait(lambda: (s := proc_stat(pid)) is not None and s.pgrp == pid, "the sleeper's session")
    stat = proc_stat(pid)
    assert stat is not None
    return pid, stat.start_ticks


def test_the_sweep_never_kills_a_process_that_reused_a_recorded_pid(
    tmp_path: Path, spawned: list[subprocess.Popen[str]]
) -> None:
    pid, start = _sleeper(spawned)
    dead_runtime = 2**22 + 7  # above any pid_max default: no such process
    path = _pidfile(tmp_path, pid, start + 1, dead_runtime, 0)

    report = sweep(tmp_path)

    assert (report.groups_killed, report.processes_killed, report.stale) == (0, 0, 1)
    assert _alive(pid), "another start time: an unrelated process, never killed"
    assert not path.exists()
    own = proc_stat(os.getpid())
    assert own is not None
    _pidfile(tmp_path, os.getpid(), own.start_ticks + 1, dead_runtime, 0)
    assert sweep(tmp_path).stale == 1  # the brief's own-pid case: this test lives on

    _pidfile(tmp_path, pid, start, dead_runtime, 0)
    assert sweep(tmp_path).killed == [pid], "the recorded start time: the same process"
    _wait(lambda: not _alive(pid), "the recorded sleeper to be killed")


def test_the_sweep_leaves_the_files_of_a_live_runtime(
    tmp_path: Path, spawned: list[subprocess.Popen[str]]
) -> None:
    pid, start = _sleeper(spawned)
    own = proc_stat(os.getpid())
    assert own is not None
    path = _pidfile(tmp_path, pid, start, os.getpid(), own.start_ticks)
    (tmp_path / "garbage.json").write_text("{not json")

    report = sweep(tmp_path)

    assert (report.live_runtime_skipped, report.unreadable, report.groups_killed) == (1, 1, 0)
    assert path.exists()
    assert _alive(pid)
