"""A JSON-RPC line over the runtime's limit (KEEL_RPC_MAX_LINE_BYTES) is a failed provider: its
process group is reclaimed at once, the request it answered is an error, and nothing waits on
the rest of the line.  Real reference sidecars over stdio (``--oversized-answer``), a real
worker and a real API on PostgreSQL."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from keel_stream.errors import BackendUnavailable
from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.http import HttpTransport
from keel_stream.gateway.process import ProviderProcess
from keel_stream.gateway.protocol import ProviderKind
from keel_stream.gateway.smoke_runtime import processes_with
from keel_stream.gateway.transport import StdioTransport
from keel_stream.kernel import CommitRequest
from keel_stream.procs import group_members
from keel_stream.store import PostgresLedger
from keel_stream.store.tenant_configs import PostgresTenantConfigs
from keel_stream.tenancy.document import ToolSpec
from keel_stream.worker.agent_settings import ModelProviders
from keel_stream.worker.providers import OpenAIProvider
from keel_stream.worker.tool_providers import ToolProviders
from tests.support.api import serve_api
from tests.support.chat_server import Fault, chat_server
from tests.support.wait import wait_until
from tests.support.workers import log_of, settled, worker_task

OVERSIZED = 64 * 1024 * 1024
"""An answer well past the default limit (8 MiB) and past what a paused pipe reader buffers."""
SWITCHES = ["--oversized-answer", str(OVERSIZED), "--ignore-sigterm"]
"""A provider that only the reclaim's SIGKILL ends."""
STUBBORN = ["--ignore-sigterm", "--ignore-stdin-eof"]
"""Only SIGKILL ends it."""
DEADLINE_S = 30.0
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}


def _marker() -> str:
    """A variable name the sidecar is told to refuse: it names the process in the table."""
    return f"KEEL_TEST_MARK_{uuid.uuid4().hex.upper()}"


def _sidecar(kind: str, marker: str) -> dict[str, Any]:
    args = ["-m", "keel_stream.gateway.sidecar_ref", "--kind", kind]
    return {
        "transport": "stdio",
        "command": sys.executable,
        "args": [*args, *SWITCHES, "--forbid-env", marker],
        "timeoutMs": 20000,
    }


async def _gone(marker: str, what: str) -> None:
    async def none_left() -> bool:
        return not processes_with(marker)

    await wait_until(none_left, DEADLINE_S, what)


async def test_a_line_over_the_limit_fails_the_provider_and_its_group_is_reclaimed(
    tmp_path: Path,
) -> None:
    audit = AuditLog(tmp_path / "audit.jsonl")
    command = [sys.executable, "-m", "keel_stream.gateway.sidecar_ref", "--kind", "tool"]
    transport = StdioTransport(
        [*command, "--oversized-answer", str(64 * 1024 * 1024), *STUBBORN],
        ENV,
        audit=audit,
        max_line_bytes=1024 * 1024,
    )
    client = GatewayClient(transport, ProviderKind.TOOL, timeout_s=DEADLINE_S)
    await client.start()
    try:
        await client.initialize()
        pgid = transport.pgid
        assert pgid is not None
        with pytest.raises(BackendUnavailable) as caught:
            await client.call_tool("upper", {"text": "hi"})
        assert "the provider sent a line over 1048576 bytes" in caught.value.message

        async def reclaimed() -> bool:
            return bool(audit.records("provider.reclaimed")) and not group_members(pgid)

        await wait_until(reclaimed, DEADLINE_S, "the provider's group reclaimed")
        (record,) = audit.records("provider.reclaimed")
        assert (record["how"], record["leftover"]) == ("sigkill", 0)
        assert record["reason"] == "the provider sent a line over 1048576 bytes"
        assert client.lost == "the provider sent a line over 1048576 bytes"
    finally:
        await client.aclose()


async def test_a_tool_provider_line_over_the_limit_is_an_error_result_and_frees_the_worker(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
) -> None:
    marker = _marker()
    await PostgresTenantConfigs(pool).put(
        "acme", {"external": {"tools": {"docs": _sidecar("tool", marker)}}}
    )
    call = Fault(tool_name="docs__upper", tool_arguments='{"text": "hi"}', tool_call_id="c1")
    async with chat_server() as (url, server):
        server.faults.append(call)
        provider = OpenAIProvider(url, "sk-test", "local")
        async with worker_task(
            database_dsn, provider=provider, model_providers=ModelProviders(url, "sk-test"), slots=1
        ):
            await _say(ledger, "call the tool")
            await settled(pool, "s1", "done", "failed", timeout_s=DEADLINE_S)
            await _gone(marker, "the provider reclaimed while the worker runs")
            await _say(ledger, "and again")  # the worker's one slot is free for the next run

            async def two_runs() -> bool:
                events = await log_of(ledger, "s1")
                return sum(e.kind == "run.finished" for e in events) == 2

            await wait_until(two_runs, DEADLINE_S, "the next run on the freed slot")
    events = await log_of(ledger, "s1")
    (result,) = [e.payload for e in events if e.kind == "tool.result"]
    assert result["isError"] is True
    (block,) = result["content"]
    assert "the provider sent a line over 8388608 bytes" in block["text"], block["text"]
    assert [e.payload["status"] for e in events if e.kind == "run.finished"] == ["done", "done"]


async def _say(ledger: PostgresLedger, text: str) -> None:
    request = CommitRequest(
        tenant_id="acme", session_id="s1", kind="user.message", payload={"text": text}
    )
    await ledger.commit(request)


async def test_an_agent_backend_line_over_the_limit_reclaims_it_and_its_sessions_go_unavailable(
    database_dsn: str, pool: asyncpg.Pool
) -> None:
    marker = _marker()
    document = {
        "external": {
            "backends": {"ref": _sidecar("agent", marker)},
            "quota": {"unmetered": "deny"},
        }
    }
    async with serve_api(database_dsn) as api, api.client() as client:
        await PostgresTenantConfigs(pool).put("acme", document)
        opened = await client.post("/v1/sessions", json={"backend": "ref"})
        assert opened.status_code == 201, opened.text
        session = opened.json()["id"]
        (pid,) = processes_with(marker)
        sent = await client.post(f"/v1/sessions/{session}/input", json={"text": "hi"})
        assert sent.status_code == 503, sent.text
        assert sent.json()["error"]["code"] == "backend_unavailable"

        async def reclaimed() -> bool:
            return pid not in processes_with(marker)

        await wait_until(reclaimed, DEADLINE_S, "the backend that sent the line reclaimed")
        await wait_until(
            lambda: _status_is(client, session, "backend-unavailable"),
            DEADLINE_S,
            "the session marked backend-unavailable",
        )
        events = (await client.get(f"/v1/sessions/{session}/events")).json()["events"]
        (lost,) = [e for e in events if e["payload"].get("type") == "backend.unavailable"]
        assert lost["payload"]["data"]["reason"] == "the provider sent a line over 8388608 bytes"
        audit = AuditLog.in_data_dir(api.config.data_dir)

        async def audited_then_respawned() -> bool:
            kinds = [r["event"] for r in audit.records()]
            return kinds[:3] == ["provider.spawned", "provider.reclaimed", "provider.spawned"]

        await wait_until(audited_then_respawned, DEADLINE_S, "reclaimed, then started again")
        (reclaim,) = audit.records("provider.reclaimed")
        assert (reclaim["pid"], reclaim["leftover"]) == (pid, 0)
        assert reclaim["reason"] == "the provider sent a line over 8388608 bytes"


async def _status_is(client: httpx.AsyncClient, session: str, status: str) -> bool:
    view = (await client.get(f"/v1/sessions/{session}")).json()
    return bool(view.get("external", {}).get("status") == status)


async def test_an_http_answer_over_the_limit_fails_the_request_and_the_connection() -> None:
    command = [sys.executable, "-m", "keel_stream.gateway.sidecar_ref", "--kind", "tool"]
    process = await ProviderProcess.spawn(
        [*command, "--http", "0", "--oversized-answer", str(4 * 1024 * 1024)], ENV
    )
    try:
        assert process.proc.stdout is not None
        line = await asyncio.wait_for(process.proc.stdout.readline(), DEADLINE_S)
        transport = HttpTransport(line.decode().split()[1], max_line_bytes=1024 * 1024)
        client = GatewayClient(transport, ProviderKind.TOOL, timeout_s=DEADLINE_S)
        await client.start()
        await client.initialize()
        with pytest.raises(BackendUnavailable) as caught:
            await client.call_tool("upper", {"text": "hi"})
        assert caught.value.message == "the provider sent a line over 1048576 bytes"
        assert client.lost == "the provider sent a line over 1048576 bytes"
        await client.aclose()
    finally:
        await process.terminate(grace_s=0.0)


MCP_SERVER = """\
import json, sys
size = int(sys.argv[1])
for raw in sys.stdin:
    msg = json.loads(raw)
    if "id" not in msg:
        continue
    method, result = msg.get("method"), {}
    if method == "initialize":
        result = {"protocolVersion": msg["params"]["protocolVersion"],
                  "capabilities": {"tools": {}}, "serverInfo": {"name": "big", "version": "1"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "big", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        result = {"content": [{"type": "text", "text": "x" * size}], "isError": False}
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
"""
"""A minimal MCP server over stdio whose one tool answers ``size`` bytes of text."""


async def test_an_mcp_server_line_over_the_limit_is_an_error_result_and_its_group_is_killed() -> (
    None
):
    marker = _marker()
    declared = {
        "protocol": "mcp",
        "transport": "stdio",
        "command": sys.executable,
        "args": ["-c", MCP_SERVER, str(4 * 1024 * 1024), marker],
    }
    spec = ToolSpec.model_validate(declared)
    providers = ToolProviders(ENV, max_line_bytes=1024 * 1024)
    try:
        (connection,) = providers.for_tenant("acme", {"big": spec})
        assert await connection.ensure()
        assert processes_with(marker)
        text, is_error = await asyncio.wait_for(connection.call("big", {}), DEADLINE_S)
        assert is_error, f"an answer of {len(text)} characters was accepted"
        await _gone(marker, "the MCP server's group killed")
    finally:
        await asyncio.wait_for(providers.aclose(), DEADLINE_S)
