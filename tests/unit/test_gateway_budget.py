"""Provider budgets as rlimits: the mapping, the refusal above the runtime's hard limits, the
cgroup v2 detection, and the audit log's file format."""

from __future__ import annotations

import resource
from pathlib import Path

import pytest

from keel_stream.errors import ActivationRefused, BackendUnavailable, BudgetRefused, InvalidConfig
from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.budget import cgroup_v2_status, check, limits_of, wrap_command
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.protocol import ProviderKind
from keel_stream.gateway.transport import StdioTransport
from keel_stream.tenancy.document import Budget, parse_config


def test_a_budget_becomes_rlimits_in_their_own_units() -> None:
    budget = Budget.model_validate(
        {"cpuSeconds": 5, "addressSpaceMb": 512, "openFiles": 64, "processes": 32}
    )
    limits = {limit.field: (limit.resource, limit.value) for limit in limits_of(budget)}
    assert limits == {
        "cpuSeconds": (resource.RLIMIT_CPU, 5),
        "addressSpaceMb": (resource.RLIMIT_AS, 512 * 1024 * 1024),
        "openFiles": (resource.RLIMIT_NOFILE, 64),
        "processes": (resource.RLIMIT_NPROC, 32),
    }
    assert limits_of(None) == []
    assert limits_of(Budget.model_validate({})) == []


def test_only_a_budget_wraps_the_command() -> None:
    assert wrap_command(["prog", "a"], []) == ["prog", "a"]
    wrapped = wrap_command(["prog", "a"], limits_of(Budget.model_validate({"openFiles": 64})))
    assert wrapped[-3:] == [f"{resource.RLIMIT_NOFILE}=64", "prog", "a"]


def test_a_budget_above_the_runtimes_hard_limit_is_refused() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard != resource.RLIM_INFINITY
    check(limits_of(Budget.model_validate({"openFiles": hard})))  # the hard limit: granted
    with pytest.raises(BudgetRefused) as refused:
        check(limits_of(Budget.model_validate({"openFiles": hard + 1})))
    assert refused.value.code == "backend_budget_refused"
    assert isinstance(refused.value, ActivationRefused)
    assert refused.value.data == {
        "refused": [{"limit": "openFiles", "requested": hard + 1, "hardLimit": hard}]
    }
    assert "openFiles" in refused.value.message


def test_an_http_provider_takes_no_budget() -> None:
    tool = {"transport": "http", "url": "http://x", "budget": {"openFiles": 8}}
    with pytest.raises(InvalidConfig, match="takes no budget"):
        parse_config({"external": {"tools": {"t": tool}}})


async def test_a_missing_program_with_a_budget_is_still_unavailable_at_start() -> None:
    budget = Budget.model_validate({"openFiles": 64})
    transport = StdioTransport(["/nonexistent/sidecar"], {"PATH": "/usr/bin"}, budget=budget)
    with pytest.raises(BackendUnavailable, match="/nonexistent/sidecar"):
        await GatewayClient(transport, ProviderKind.AGENT).start()
    assert transport.process is None


def _cgroup(tmp_path: Path, membership: str, controllers: str) -> tuple[Path, Path]:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "cgroup").write_text(membership)
    own = tmp_path / "fs" / "keel"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text(controllers)
    (own / "cgroup.subtree_control").write_text("")
    (own / "cgroup.procs").write_text("")
    return tmp_path / "fs", tmp_path / "proc" / "cgroup"


@pytest.mark.parametrize(
    ("membership", "controllers", "verdict"),
    [
        ("0::/keel\n", "cpuset cpu io memory pids\n", None),
        ("0::/keel\n", "hugetlb\n", "controllers not delegated here"),
        ("4:memory:/x\n0::/keel\n", "memory cpu pids\n", "hybrid hierarchy"),
        ("4:memory:/x\n", "", "no cgroup v2"),
    ],
)
def test_cgroup_v2_is_usable_only_when_delegated(
    tmp_path: Path, membership: str, controllers: str, verdict: str | None
) -> None:
    root, proc = _cgroup(tmp_path, membership, controllers)
    status = cgroup_v2_status(root, proc)
    if verdict is None:
        assert status is None
    else:
        assert status is not None
        assert status.startswith(verdict)


def test_the_audit_log_appends_one_json_object_per_line(tmp_path: Path) -> None:
    audit = AuditLog.in_data_dir(tmp_path)
    assert audit.path == tmp_path / "gateway" / "audit.jsonl"
    assert audit.records() == []
    audit.record("provider.spawned", name="a", pid=1)
    audit.record("provider.reclaimed", name="a", how="exited")
    assert [r["event"] for r in audit.records()] == ["provider.spawned", "provider.reclaimed"]
    assert audit.records("provider.reclaimed")[0]["how"] == "exited"
    assert len(audit.path.read_bytes().splitlines()) == 2
    assert audit.path.stat().st_mode & 0o777 == 0o600
