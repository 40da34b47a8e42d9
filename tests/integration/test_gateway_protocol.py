"""The gateway protocol end to end: GatewayClient against the reference sidecar, over stdio and
over Streamable HTTP (every method, every reserved error, activation refusal, process reclaim)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from keel_stream.errors import (
    BackendCancelRefused,
    BackendTimeout,
    BackendUnavailable,
    IncompatibleVersion,
    ProtocolError,
    RequestCancelled,
    WrongProviderKind,
)
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.http import HttpTransport
from keel_stream.gateway.process import ProviderProcess, group_alive
from keel_stream.gateway.protocol import PROTOCOL_VERSION, ErrorCode, Event, ProviderKind
from keel_stream.gateway.transport import StdioTransport
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
SIDECAR = [sys.executable, "-m", "keel_stream.gateway.sidecar_ref"]
MINIMAL_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
    "HOME": str(ROOT),
    "LANG": "C.UTF-8",
}
DEADLINE_S = 20.0


@dataclass
class Conn:
    client: GatewayClient
    process: ProviderProcess
    events: list[Event] = field(default_factory=list)

    def seen(self, kind: str) -> list[Event]:
        return [event for event in self.events if event.type == kind]

    async def wait_for_event(self, kind: str) -> Event:
        async def present() -> bool:
            return bool(self.seen(kind))

        await wait_until(present, DEADLINE_S, f"a {kind} event")
        return self.seen(kind)[0]

    async def wait_exit(self) -> int:
        return await asyncio.wait_for(self.process.proc.wait(), DEADLINE_S)


@asynccontextmanager
async def connect(
    transport: str,
    *args: str,
    kind: ProviderKind = ProviderKind.AGENT,
    env: dict[str, str] | None = None,
    initialize: bool = True,
) -> AsyncIterator[Conn]:
    env = MINIMAL_ENV if env is None else env
    kind_flag = ["--kind", "agent" if kind is ProviderKind.AGENT else "tool"]
    if transport == "stdio":
        stdio = StdioTransport([*SIDECAR, *kind_flag, *args], env, cwd=str(ROOT), grace_s=1.0)
        client = GatewayClient(stdio, kind, timeout_s=DEADLINE_S)
        await client.start()
        assert stdio.process is not None
        conn = Conn(client, stdio.process)
        cleanup = None
    else:
        process = await ProviderProcess.spawn(
            [*SIDECAR, *kind_flag, "--http", "0", *args], env, str(ROOT)
        )
        assert process.proc.stdout is not None
        line = await asyncio.wait_for(process.proc.stdout.readline(), DEADLINE_S)
        client = GatewayClient(HttpTransport(line.decode().split()[1]), kind, timeout_s=DEADLINE_S)
        await client.start()
        conn, cleanup = Conn(client, process), process
    client.on_event(conn.events.append)
    try:
        if initialize:
            await client.initialize()
        yield conn
    finally:
        await client.aclose()
        if cleanup is not None:
            await cleanup.terminate(grace_s=0.0)


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def test_initialize_negotiates_version_kind_and_capabilities(transport: str) -> None:
    async with connect(transport) as conn:
        server = conn.client.server
        assert server is not None
        assert server.protocol_version == PROTOCOL_VERSION
        assert server.kind is ProviderKind.AGENT
        assert server.capabilities.cancel
        assert (await conn.client.health()).status == "ok"


async def test_a_turn_streams_events_with_usage(transport: str) -> None:
    async with connect(transport) as conn:
        opened = await conn.client.open_session()
        assert (opened.state_owner, opened.metering, opened.last_seq) == ("external", "external", 0)
        subscribed = await conn.client.subscribe(opened.session_id)
        assert subscribed.subscribed
        sent = await conn.client.send_message(opened.session_id, "hello world")
        finished = await conn.wait_for_event("turn.finished")
        assert finished.turn_id == sent.turn_id
        assert finished.data["usage"] == {"inputTokens": 2, "outputTokens": 3}
        assert conn.events[0].type == "turn.started"
        deltas = "".join(event.data["text"] for event in conn.seen("text.delta"))
        assert deltas == finished.data["text"] == "echo: hello world"
        assert [event.seq for event in conn.events] == list(range(1, len(conn.events) + 1))


async def test_a_late_subscriber_gets_the_backlog(transport: str) -> None:
    async with connect(transport) as conn:
        session = (await conn.client.open_session()).session_id
        result = await conn.client.send_message(session, "hi", wait=True)
        assert result.text == "echo: hi"
        assert result.usage is not None
        subscribed = await conn.client.subscribe(session, after_seq=1)
        await conn.wait_for_event("turn.finished")
        assert conn.events[0].seq == 2
        assert subscribed.last_seq == conn.events[-1].seq


async def test_no_usage_means_metering_none(transport: str) -> None:
    async with connect(transport, "--no-usage") as conn:
        opened = await conn.client.open_session()
        assert opened.metering == "none"
        result = await conn.client.send_message(opened.session_id, "hi", wait=True)
        assert result.usage is None


async def test_resume_is_true_only_for_known_open_sessions(transport: str) -> None:
    async with connect(transport) as conn:
        session = (await conn.client.open_session()).session_id
        await conn.client.send_message(session, "hi", wait=True)
        resumed = await conn.client.resume_session(session)
        assert resumed.resumed
        assert resumed.last_seq > 0
        assert not (await conn.client.resume_session("ref-unknown")).resumed
        assert (await conn.client.close_session(session)).closed
        assert not (await conn.client.resume_session(session)).resumed


async def test_cancel_stops_a_slow_turn(transport: str) -> None:
    async with connect(transport, "--slow-ms", "300") as conn:
        session = (await conn.client.open_session()).session_id
        await conn.client.subscribe(session)
        turn = (await conn.client.send_message(session, "one two three four")).turn_id
        await conn.wait_for_event("turn.started")
        assert (await conn.client.cancel(session, turn)).cancelled
        await conn.wait_for_event("turn.cancelled")
        assert not conn.seen("turn.finished")
        assert not (await conn.client.cancel(session, turn)).cancelled


async def test_a_cancelled_waiting_send_answers_minus_32002(transport: str) -> None:
    async with connect(transport, "--slow-ms", "300") as conn:
        session = (await conn.client.open_session()).session_id
        await conn.client.subscribe(session)
        waiting = asyncio.create_task(conn.client.send_message(session, "a b c d", wait=True))
        started = await conn.wait_for_event("turn.started")
        assert started.turn_id is not None
        await conn.client.cancel(session, started.turn_id)
        with pytest.raises(RequestCancelled) as caught:
            await waiting
        assert caught.value.rpc_code == -32002


async def test_a_provider_timeout_answers_minus_32001(transport: str) -> None:
    async with connect(transport, "--slow-ms", "300") as conn:
        session = (await conn.client.open_session()).session_id
        with pytest.raises(BackendTimeout) as caught:
            await conn.client.send_message(session, "a b c", wait=True, timeout_ms=50)
        assert caught.value.rpc_code == -32001
        assert caught.value.retriable


async def test_an_unknown_or_closed_session_answers_minus_32003(transport: str) -> None:
    async with connect(transport) as conn:
        with pytest.raises(BackendUnavailable) as caught:
            await conn.client.send_message("ref-unknown", "hi")
        assert caught.value.rpc_code == -32003
        session = (await conn.client.open_session()).session_id
        await conn.client.close_session(session)
        with pytest.raises(BackendUnavailable):
            await conn.client.subscribe(session)


async def test_ignore_cancel_answers_an_error_never_success(transport: str) -> None:
    async with connect(transport, "--ignore-cancel", "--slow-ms", "100") as conn:
        assert conn.client.server is not None
        assert not conn.client.server.capabilities.cancel
        session = (await conn.client.open_session()).session_id
        await conn.client.subscribe(session)
        turn = (await conn.client.send_message(session, "a b")).turn_id
        with pytest.raises(BackendCancelRefused) as caught:
            await conn.client.cancel(session, turn)
        assert caught.value.rpc_code == ErrorCode.UNAVAILABLE
        assert caught.value.data["reason"] == "cancel_unsupported"
        await conn.wait_for_event("turn.finished")
        assert not conn.seen("turn.cancelled")


async def test_unknown_methods_and_bad_params_are_protocol_errors(transport: str) -> None:
    async with connect(transport) as conn:
        with pytest.raises(ProtocolError) as missing:
            await conn.client.request("session.teleport", {})
        assert missing.value.rpc_code == ErrorCode.METHOD_NOT_FOUND
        with pytest.raises(ProtocolError) as tool_method:
            await conn.client.request("tools.list")
        assert tool_method.value.rpc_code == ErrorCode.METHOD_NOT_FOUND
        with pytest.raises(ProtocolError) as bad:
            await conn.client.request("session.open", {"bogus": 1})
        assert bad.value.rpc_code == ErrorCode.INVALID_PARAMS


async def test_an_incompatible_version_refuses_activation(transport: str) -> None:
    async with connect(transport, "--version-override", "2020-01-01", initialize=False) as conn:
        with pytest.raises(IncompatibleVersion) as caught:
            await conn.client.initialize()
        assert caught.value.data == {"protocolVersion": "2020-01-01"}
        assert conn.client.server is None
        with pytest.raises(ProtocolError):
            await conn.client.health()


async def test_a_provider_of_another_kind_refuses_activation(transport: str) -> None:
    async with connect(transport, "--kind", "tool", initialize=False) as conn:
        with pytest.raises(WrongProviderKind):
            await conn.client.initialize()
        assert conn.client.server is None


async def test_a_hung_handshake_times_out_within_the_request_timeout(transport: str) -> None:
    async with connect(transport, "--hang-handshake", initialize=False) as conn:
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(BackendTimeout) as caught:
            await conn.client.initialize(timeout_s=0.5)
        assert caught.value.rpc_code == ErrorCode.TIMEOUT
        assert 0.5 <= loop.time() - started < 2.0


async def test_the_tool_provider_advertises_and_runs_its_tools(transport: str) -> None:
    async with connect(transport, kind=ProviderKind.TOOL) as conn:
        assert conn.client.server is not None
        assert {tool.name for tool in conn.client.server.tools} == {"upper", "add"}
        assert {tool.name for tool in (await conn.client.list_tools()).tools} == {"upper", "add"}
        assert (await conn.client.call_tool("upper", {"text": "abc"})).content == "ABC"
        assert (await conn.client.call_tool("add", {"a": 2, "b": 3})).content == 5
        for name, arguments in [("add", {"a": "x"}), ("nope", {})]:
            with pytest.raises(ProtocolError) as caught:
                await conn.client.call_tool(name, arguments)
            assert caught.value.rpc_code == ErrorCode.INVALID_PARAMS
        with pytest.raises(ProtocolError):
            await conn.client.open_session()


async def test_a_crashing_provider_is_unavailable(transport: str) -> None:
    async with connect(transport, "--crash-after", "2") as conn:
        assert (await conn.client.health()).status == "ok"
        with pytest.raises(BackendUnavailable):
            await conn.client.health()
        assert await conn.wait_exit() == 3


async def test_close_without_a_session_shuts_the_provider_down(transport: str) -> None:
    async with connect(transport) as conn:
        assert (await conn.client.shutdown()).closed
        assert await conn.wait_exit() == 0


def _stdio_client(*args: str, env: dict[str, str]) -> tuple[GatewayClient, StdioTransport]:
    stdio = StdioTransport([*SIDECAR, *args], env, cwd=str(ROOT), grace_s=1.0)
    return GatewayClient(stdio, ProviderKind.AGENT, timeout_s=DEADLINE_S), stdio


async def test_a_forbidden_variable_in_the_environment_refuses_start() -> None:
    client, stdio = _stdio_client(
        "--forbid-env", "DSH_API_KEY", env={**MINIMAL_ENV, "DSH_API_KEY": "x"}
    )
    await client.start()
    try:
        with pytest.raises(BackendUnavailable):
            await client.initialize()
        assert stdio.process is not None
        assert await asyncio.wait_for(stdio.process.proc.wait(), DEADLINE_S) == 2

        async def explained() -> bool:
            return any("DSH_API_KEY" in line for line in stdio.stderr_lines)

        await wait_until(explained, DEADLINE_S, "the refusal on stderr")
    finally:
        await client.aclose()


async def test_the_minimal_environment_starts_the_provider() -> None:
    assert "DSH_API_KEY" not in MINIMAL_ENV
    client, _ = _stdio_client(
        "--forbid-env",
        "DSH_API_KEY",
        "--require-env",
        "DSH_MODEL",
        env={**MINIMAL_ENV, "DSH_MODEL": "m"},
    )
    await client.start()
    try:
        assert (await client.initialize()).kind is ProviderKind.AGENT
    finally:
        await client.aclose()


async def test_a_missing_required_variable_refuses_start() -> None:
    client, stdio = _stdio_client("--require-env", "DSH_MODEL", env=MINIMAL_ENV)
    await client.start()
    try:
        with pytest.raises(BackendUnavailable):
            await client.initialize()
        assert stdio.process is not None
        assert await asyncio.wait_for(stdio.process.proc.wait(), DEADLINE_S) == 2
    finally:
        await client.aclose()


def _group_members(pgid: int) -> list[int]:
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(entry.name))
    return members


async def test_closing_a_stdio_provider_leaves_no_process_of_its_group() -> None:
    client, stdio = _stdio_client("--grandchildren", "2", env=MINIMAL_ENV)
    await client.start()
    try:
        await client.initialize()
        pgid = stdio.pgid
        assert pgid is not None
        assert len(_group_members(pgid)) == 3, "the sidecar and its two grandchildren"
    finally:
        await client.aclose()

    async def group_gone() -> bool:
        return not group_alive(pgid)

    await wait_until(group_gone, DEADLINE_S, f"process group {pgid} to be empty")
    with pytest.raises(ProcessLookupError):
        os.killpg(pgid, 0)


async def test_the_cli_command_runs_the_sidecar() -> None:
    command = [sys.executable, "-m", "keel_stream", "sidecar-ref", "--kind", "tool"]
    client = GatewayClient(StdioTransport(command, MINIMAL_ENV, cwd=str(ROOT)), ProviderKind.TOOL)
    await client.start()
    try:
        assert (await client.initialize()).kind is ProviderKind.TOOL
        assert (await client.call_tool("add", {"a": 1, "b": 2})).content == 3
    finally:
        await client.aclose()


async def test_the_http_sidecar_answers_malformed_posts_with_json_rpc_errors() -> None:
    process = await ProviderProcess.spawn([*SIDECAR, "--http", "0"], MINIMAL_ENV, str(ROOT))
    try:
        assert process.proc.stdout is not None
        line = await asyncio.wait_for(process.proc.stdout.readline(), DEADLINE_S)
        async with httpx.AsyncClient() as http:
            url = line.decode().split()[1]
            parse = await http.post(url, content=b"{nope")
            invalid = await http.post(url, json={"jsonrpc": "2.0", "id": 9, "method": 1})
            note = await http.post(url, json={"jsonrpc": "2.0", "method": "health"})
        assert parse.json()["error"]["code"] == -32700
        assert invalid.json() == {
            "jsonrpc": "2.0",
            "id": 9,
            "error": {"code": -32600, "message": invalid.json()["error"]["message"]},
        }
        assert note.status_code == 202
    finally:
        await process.terminate(grace_s=0.0)
