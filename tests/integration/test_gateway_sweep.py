"""Budgets applied at spawn and audited; pidfiles, and the sweep that reclaims what a SIGKILLed
runtime left (the seed's two known gaps), with the pid-reuse rule."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.config import Budget
from keel_stream.gateway.errors import BudgetRefused
from keel_stream.gateway.pidfiles import PidRegistry, group_members, proc_stat, sweep
from keel_stream.gateway.protocol import ProviderKind
from keel_stream.gateway.transport import StdioTransport

SIDECAR = [sys.executable, "-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent"]
SECRET = "s3cret-value-never-logged"


def _wait(check: Callable[[], bool], what: str, deadline_s: float = 20.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {deadline_s}s: {what}")
        time.sleep(0.05)


def _limit(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith(name):
            return line[len(name) :].split()[0]
    raise AssertionError(f"no {name} in /proc/{pid}/limits")


async def test_a_budget_is_applied_at_spawn_and_the_audit_holds_no_secret(
    tmp_path: Path,
) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    registry = PidRegistry(tmp_path / "pids")
    budget = Budget.model_validate({"openFiles": 64, "addressSpaceMb": 4096})
    env = {"PATH": os.environ["PATH"], "TOKEN": SECRET}
    transport = StdioTransport(
        SIDECAR, env, name="ref", budget=budget, declared_env={"TOKEN": "secret:TOKEN"},
        audit=audit, registry=registry,
    )  # fmt: skip
    client = GatewayClient(transport, ProviderKind.AGENT, timeout_s=10)
    await client.start()
    try:
        await client.initialize()
        pid = transport.pgid
        assert pid is not None
        assert _limit(pid, "Max open files") == "64"
        assert _limit(pid, "Max address space") == str(4096 * 1024 * 1024)
        assert registry.path(pid).exists()
    finally:
        await client.aclose()
    assert not registry.path(pid).exists()  # a clean reclaim removes its pidfile
    (spawned,) = audit.records("provider.spawned")
    assert spawned["env"]["TOKEN"] == "secret:TOKEN"
    assert spawned["rlimits"] == {"openFiles": 64, "addressSpaceMb": 4096 * 1024 * 1024}
    assert audit.records("provider.reclaimed")[0]["leftover"] == 0
    assert SECRET not in audit.path.read_text()


async def test_a_budget_above_the_hard_limit_refuses_activation_and_is_audited(
    tmp_path: Path,
) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    budget = Budget.model_validate({"openFiles": hard + 1})
    transport = StdioTransport(SIDECAR, {"PATH": os.environ["PATH"]}, budget=budget, audit=audit)
    with pytest.raises(BudgetRefused):
        await transport.start(GatewayClient(transport, ProviderKind.AGENT))
    assert transport.process is None  # nothing was spawned
    (refused,) = audit.records("provider.budget_refused")
    assert refused["refused"][0]["limit"] == "openFiles"


def test_the_sweep_reclaims_the_groups_of_a_sigkilled_runtime(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    runtime = subprocess.Popen(
        [sys.executable, "-m", "tests.support.gateway_runtime", str(pids)],
        stdout=subprocess.PIPE,
        text=True,
    )
    pgid = 0
    try:
        assert runtime.stdout is not None
        pgid = int(runtime.stdout.readline())
        _wait(lambda: len(group_members(pgid)) >= 3, "the sidecar and its 2 grandchildren")
        runtime.send_signal(signal.SIGKILL)
        runtime.wait(10)
        assert len(group_members(pgid)) >= 3  # the gap: nothing reclaimed them
        report = sweep(pids, AuditLog(tmp_path / "audit.jsonl"))
        assert (report.groups_killed, report.processes_killed) == (1, 3)
        _wait(lambda: not group_members(pgid), "no process left in the group")
        assert not list(pids.glob("*.json"))
    finally:
        if pgid and group_members(pgid):
            os.killpg(pgid, signal.SIGKILL)
        runtime.kill()
        runtime.wait(10)
        if runtime.stdout is not None:
            runtime.stdout.close()


def test_the_sweep_never_kills_a_process_that_reused_a_recorded_pid(tmp_path: Path) -> None:
    own = proc_stat(os.getpid())
    assert own is not None
    pids = tmp_path / "pids"
    pids.mkdir()
    record = {
        "pid": os.getpid(), "pgid": os.getpid(), "start_ticks": own.start_ticks + 1,
        "runtime_pid": 2**22 + 1, "runtime_start_ticks": 0, "provider": "old", "command": ["x"],
    }  # fmt: skip
    (pids / f"{os.getpid()}.json").write_bytes(orjson.dumps(record))
    report = sweep(pids)
    assert (report.groups_killed, report.stale) == (0, 1)
    assert not list(pids.glob("*.json"))
