"""MCP servers as tool sources: a native session (the fake provider asks for the tool, a real
worker on real PostgreSQL) calls the tools of mcp-server-time, a PyPI MCP server that is not
ours, through the official MCP SDK, over stdio and over Streamable HTTP; each result is
committed as the tool.result. The stdio server gets only the minimal environment plus what it
declares, and is reclaimed when the worker stops."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from keel_stream.kernel import CommitRequest, Event
from keel_stream.store import PostgresLedger
from keel_stream.store.tenant_configs import PostgresTenantConfigs
from keel_stream.tenancy.document import MINIMAL_ENV, parse_config
from keel_stream.worker.mcp_connection import stdio_parameters
from tests.support.workers import log_of, settled, worker_task

CONVERT = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
ASK = (
    f"[[tool:time__convert_time {json.dumps(CONVERT)}]] "
    '[[tool:time__get_current_time {"timezone": "Nowhere/Atlantis"}]]'
)


def processes_naming(marker: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(marker).encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


@pytest.fixture
async def http_server() -> AsyncIterator[str]:
    """mcp-server-time served over Streamable HTTP on a loopback port of its choosing."""
    code = (
        "import anyio\nfrom mcp_server_time.server import create_server\n"
        "anyio.run(lambda: create_server('UTC').run_streamable_http_async(port=0))"
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    assert process.stderr is not None
    try:
        async with asyncio.timeout(30):
            while (line := (await process.stderr.readline()).decode()) != "":
                if found := re.search(r"Uvicorn running on (http://\S+)", line):
                    break
        assert found, "the MCP server never said where it listens"
        drain = asyncio.create_task(process.stderr.read())
        yield found[1] + "/mcp"
    finally:
        process.terminate()
        await process.wait()
    await drain


async def run_session(
    pool: asyncpg.Pool, ledger: PostgresLedger, dsn: str, server: dict[str, Any]
) -> list[Event]:
    await PostgresTenantConfigs(pool).put("acme", {"external": {"tools": {"time": server}}})
    async with worker_task(dsn):
        request = CommitRequest(tenant_id="acme", session_id="s1", kind="user.message",
                                payload={"text": ASK})  # fmt: skip
        await ledger.commit(request)
        await settled(pool, "s1", "done", "failed")
    return await log_of(ledger, "s1")


def assert_time_results(events: list[Event]) -> None:
    assert [e.kind for e in events] == [
        "user.message", "assistant.message", "tool.result", "tool.result", "assistant.message",
        "run.finished",
    ]  # fmt: skip
    converted, refused = events[2].payload, events[3].payload
    assert converted["isError"] is False
    answer = json.loads(converted["content"][0]["text"])
    assert answer["source"]["datetime"].endswith("T12:00:00+00:00")
    assert answer["target"]["datetime"].endswith("T21:00:00+09:00")
    assert answer["time_difference"] == "+9.0h"
    assert refused["isError"] is True
    assert "Nowhere/Atlantis" in refused["content"][0]["text"]
    assert events[5].payload["status"] == "done"


async def test_a_session_calls_an_mcp_server_over_stdio(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    tmp_path: Path,
) -> None:
    marker = tmp_path / "mcp-time-marker"  # names the server in the process table
    server = {
        "protocol": "mcp",
        "transport": "stdio",
        "command": sys.executable,
        "args": [
            "-X",
            f"pycache_prefix={marker}",
            "-m",
            "mcp_server_time",
            "--local-timezone",
            "UTC",
        ],
        "timeoutMs": 20000,
    }
    events = await run_session(pool, ledger, database_dsn, server)
    assert_time_results(events)
    assert not processes_naming(marker), "the worker reclaimed the MCP server when it stopped"


async def test_a_session_calls_an_mcp_server_over_streamable_http(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    http_server: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEEL_SECRET_TIME_TOKEN", "t0k")
    server = {
        "protocol": "mcp",
        "transport": "http",
        "url": http_server,
        "headers": {"X-Time-Token": "secret:TIME_TOKEN"},
        "timeoutMs": 20000,
    }
    assert_time_results(await run_session(pool, ledger, database_dsn, server))


def test_a_stdio_server_sees_only_the_minimal_environment_and_its_own(tmp_path: Path) -> None:
    shown = "import json, os; print(json.dumps(dict(os.environ)))"
    declared = {"protocol": "mcp", "transport": "stdio", "command": sys.executable,
                "args": ["-c", shown], "env": {"TIME_TOKEN": "secret:TIME_TOKEN"}}  # fmt: skip
    spec = parse_config({"external": {"tools": {"time": declared}}}).external.tools["time"]
    runtime = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KEEL_SECRET_TIME_TOKEN": "t0k",
               "KEEL_DATABASE_URL": "postgresql://not-for-tools"}  # fmt: skip
    params = stdio_parameters(spec, runtime, "external.tools.time")
    # The SDK adds some of the runtime's own variables to what it is given: the wrapper drops them.
    sdk_env = {**(params.env or {}), "SHELL": "/bin/sh", "LOGNAME": "keel", "TERM": "xterm"}
    printed = subprocess.run(
        [params.command, *params.args], env=sdk_env, capture_output=True, check=True, text=True
    ).stdout
    seen = json.loads(printed)
    assert set(seen) <= {
        *MINIMAL_ENV,
        "TIME_TOKEN",
        "LC_CTYPE",
    }  # LC_CTYPE: PEP 538, the child's own
    assert seen["TIME_TOKEN"] == "t0k"
    assert seen["HOME"] == str(tmp_path)
    assert "KEEL_DATABASE_URL" not in seen
    assert "SHELL" not in seen


def test_a_secret_reference_in_an_mcp_servers_args_resolves_when_it_starts() -> None:
    declared = {"protocol": "mcp", "transport": "stdio", "command": sys.executable,
                "args": ["-c", "import sys; print(sys.argv[1:])", "secret:TIME_TOKEN",
                         "--token=env:TIME_TOKEN"]}  # fmt: skip
    spec = parse_config({"external": {"tools": {"time": declared}}}).external.tools["time"]
    runtime = {"PATH": "/usr/bin:/bin", "KEEL_SECRET_TIME_TOKEN": "t0k", "TIME_TOKEN": "t1k"}
    params = stdio_parameters(spec, runtime, "external.tools.time")
    printed = subprocess.run(
        [params.command, *params.args], env=params.env, capture_output=True, check=True, text=True
    ).stdout
    assert printed.strip() == "['t0k', '--token=t1k']"
