"""A provider's life in a running runtime: a lost stdio provider's process group is reclaimed at
once (audited, before any reconnect), and every request, the handshake included, has the
provider's declared timeoutMs.  Real reference sidecars, no runtime restart."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from keel_stream.errors import BackendTimeout
from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.connection import Connection, ConnectionHooks, Supervision
from keel_stream.gateway.pidfiles import PidRegistry
from keel_stream.gateway.protocol import ProviderKind
from keel_stream.gateway.transport import StdioTransport
from keel_stream.procs import group_members
from keel_stream.tenancy.document import BackendSpec
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
SIDECAR = ["-m", "keel_stream.gateway.sidecar_ref"]
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
RECLAIM_BOUND_S = 2.0
DEADLINE_S = 20.0


def _spec(*switches: str, **fields: Any) -> BackendSpec:
    return BackendSpec.model_validate(
        {
            "transport": "stdio",
            "command": sys.executable,
            "args": [*SIDECAR, "--kind", "agent", *switches],
            **fields,
        }
    )


def _sigkill_leader(pgid: int) -> None:
    """The provider dies by SIGKILL (no cleanup of its own); its grandchild lives on."""
    os.kill(pgid, signal.SIGKILL)


async def _group_empty_within(pgid: int, bound_s: float) -> None:
    async def empty() -> bool:
        return not group_members(pgid)

    await wait_until(empty, bound_s, f"no live process left in group {pgid}", interval_s=0.02)


@pytest.fixture
def groups() -> Iterator[list[int]]:
    """Process groups a test started; whatever of them is left is killed at the end."""
    pgids: list[int] = []
    yield pgids
    for pgid in pgids:
        for stat in group_members(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(stat.pid, signal.SIGKILL)


async def test_a_lost_stdio_backend_group_is_reclaimed_and_audited_before_reconnecting(
    tmp_path: Path, groups: list[int]
) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    registry = PidRegistry(tmp_path / "pids")
    lost: list[str] = []

    async def on_lost(reason: str) -> None:
        lost.append(reason)

    hooks = ConnectionHooks(on_lost=on_lost, environ=ENV, audit=audit, registry=registry)
    supervision = Supervision(reconnect_initial_s=0.05, reconnect_max_s=0.1)
    spec = _spec("--grandchildren", "1")
    connection = Connection("external.backends.ref", spec, ProviderKind.AGENT, hooks, supervision)
    try:
        await connection.ensure()
        (spawned,) = audit.records("provider.spawned")
        pgid = spawned["pgid"]
        groups.append(pgid)

        async def two_members() -> bool:
            return len(group_members(pgid)) == 2

        await wait_until(two_members, DEADLINE_S, "the sidecar and its sleeping grandchild")
        started = asyncio.get_running_loop().time()
        _sigkill_leader(pgid)

        await _group_empty_within(pgid, RECLAIM_BOUND_S)
        reclaimed = [r for r in audit.records("provider.reclaimed") if r["pgid"] == pgid]

        async def audited() -> bool:
            nonlocal reclaimed
            reclaimed = [r for r in audit.records("provider.reclaimed") if r["pgid"] == pgid]
            return bool(reclaimed)

        await wait_until(audited, RECLAIM_BOUND_S, "the reclaim's audit record")
        assert asyncio.get_running_loop().time() - started < RECLAIM_BOUND_S
        (record,) = reclaimed
        assert (record["leftover"], record["how"]) == (0, "sigterm")
        assert record["reason"] == "the provider closed its stdout"
        assert not registry.path(pgid).exists(), "a clean reclaim removes the pidfile"
        assert lost == ["the provider closed its stdout"]

        async def reconnected() -> bool:
            return connection.up and connection.generation == 2

        await wait_until(reconnected, DEADLINE_S, "the backend to come up again")
        events = [r["event"] for r in audit.records()]
        assert events == ["provider.spawned", "provider.reclaimed", "provider.spawned"], (
            "the lost group is reclaimed before the provider is spawned again"
        )
        groups.append(audit.records("provider.spawned")[-1]["pgid"])
    finally:
        await connection.close()


async def test_a_lost_stdio_provider_group_is_reclaimed_without_anyone_closing_it(
    tmp_path: Path, groups: list[int]
) -> None:
    """The reclaim lives in the stdio transport: a ToolProvider's connection (which only
    notices the loss at its next use) leaves nothing behind meanwhile either."""
    audit = AuditLog(tmp_path / "audit.jsonl")
    command = [sys.executable, *SIDECAR, "--kind", "tool", "--grandchildren", "1"]
    transport = StdioTransport(command, ENV, cwd=str(ROOT), audit=audit)
    client = GatewayClient(transport, ProviderKind.TOOL, timeout_s=DEADLINE_S)
    await client.start()
    try:
        await client.initialize()
        pgid = transport.pgid
        assert pgid is not None
        groups.append(pgid)

        async def two_members() -> bool:
            return len(group_members(pgid)) == 2

        await wait_until(two_members, DEADLINE_S, "the sidecar and its sleeping grandchild")
        _sigkill_leader(pgid)

        await _group_empty_within(pgid, RECLAIM_BOUND_S)

        async def audited() -> bool:
            return bool(audit.records("provider.reclaimed"))

        await wait_until(audited, RECLAIM_BOUND_S, "the reclaim's audit record")
        assert client.lost == "the provider closed its stdout"
    finally:
        await client.aclose()
    assert len(audit.records("provider.reclaimed")) == 1, "one reclaim, however often closed"


async def test_the_handshake_has_the_providers_declared_timeout() -> None:
    hooks = ConnectionHooks(environ=ENV)
    spec = _spec("--hang-handshake", timeoutMs=1000)
    connection = Connection("external.backends.ref", spec, ProviderKind.AGENT, hooks)
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(BackendTimeout) as caught:
            async with asyncio.timeout(DEADLINE_S):
                await connection.ensure()
        took = loop.time() - started
        assert "initialize got no answer within 1.0s" in caught.value.message
        assert 1.0 <= took < 3.0, f"the handshake gave up after {took:.1f}s, not timeoutMs"
    finally:
        await connection.close()
