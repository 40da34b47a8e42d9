"""The reference sidecar's --state-file: sessions survive a crash (SIGKILL) and a restart, so
session.resume answers resumed=true with the same lastSeq and event.stream replays them."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from keel_stream.errors import BackendUnavailable
from keel_stream.gateway.client import GatewayClient
from keel_stream.gateway.protocol import Event, ProviderKind
from keel_stream.gateway.transport import StdioTransport
from tests.support.wait import wait_until

ROOT = Path(__file__).resolve().parents[2]
SIDECAR = [sys.executable, "-m", "keel_stream.gateway.sidecar_ref", "--kind", "agent"]
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
DEADLINE_S = 20.0


@dataclass
class Sidecar:
    client: GatewayClient
    transport: StdioTransport
    events: list[Event] = field(default_factory=list)

    async def crash(self) -> None:
        """SIGKILL the sidecar's whole group, as a crash would leave it: no shutdown path."""
        assert self.transport.process is not None
        os.killpg(self.transport.process.pgid, signal.SIGKILL)
        await asyncio.wait_for(self.transport.process.proc.wait(), DEADLINE_S)


@asynccontextmanager
async def sidecar(state_file: Path | None) -> AsyncIterator[Sidecar]:
    switches = [] if state_file is None else ["--state-file", str(state_file)]
    transport = StdioTransport([*SIDECAR, *switches], ENV, cwd=str(ROOT), grace_s=1.0)
    client = GatewayClient(transport, ProviderKind.AGENT, timeout_s=DEADLINE_S)
    running = Sidecar(client, transport)
    client.on_event(running.events.append)
    await client.start()
    try:
        await client.initialize()
        yield running
    finally:
        await client.aclose()


async def _a_finished_turn(state_file: Path | None) -> tuple[str, int]:
    """Open a session, finish one turn, crash the sidecar: the session id and its lastSeq."""
    async with sidecar(state_file) as first:
        session = (await first.client.open_session()).session_id
        assert (await first.client.send_message(session, "hello there", wait=True)).text
        last_seq = (await first.client.resume_session(session)).last_seq
        assert last_seq > 0
        await first.crash()
    return session, last_seq


async def test_a_restarted_sidecar_resumes_its_stored_sessions(tmp_path: Path) -> None:
    state = tmp_path / "sidecar-state.json"
    session, last_seq = await _a_finished_turn(state)
    async with sidecar(state) as second:
        resumed = await second.client.resume_session(session)
        assert (resumed.resumed, resumed.last_seq) == (True, last_seq)
        subscribed = await second.client.subscribe(session, after_seq=1)
        assert subscribed.last_seq == last_seq

        async def replayed() -> bool:
            return len(second.events) == last_seq - 1

        await wait_until(replayed, DEADLINE_S, "the stored events after seq 1")
        assert [event.seq for event in second.events] == list(range(2, last_seq + 1))
        assert second.events[-1].type == "turn.finished"
        await second.client.send_message(session, "again", wait=True)
        assert (await second.client.resume_session(session)).last_seq > last_seq


async def test_without_a_state_file_a_restarted_sidecar_resumes_nothing(tmp_path: Path) -> None:
    session, _ = await _a_finished_turn(None)
    async with sidecar(None) as second:
        resumed = await second.client.resume_session(session)
        assert (resumed.resumed, resumed.last_seq) == (False, 0)
    assert not list(tmp_path.iterdir())


async def test_a_closed_session_stays_closed_after_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    async with sidecar(state) as first:
        kept = (await first.client.open_session()).session_id
        closed = (await first.client.open_session()).session_id
        await first.client.close_session(closed)
        await first.client.shutdown()  # a graceful stop keeps the open session resumable
    async with sidecar(state) as second:
        assert (await second.client.resume_session(kept)).resumed
        assert not (await second.client.resume_session(closed)).resumed
        with pytest.raises(BackendUnavailable):
            await second.client.send_message(closed, "hi")


async def test_an_unreadable_state_file_refuses_start(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    state.write_text("{not json")
    transport = StdioTransport([*SIDECAR, "--state-file", str(state)], ENV, cwd=str(ROOT))
    client = GatewayClient(transport, ProviderKind.AGENT, timeout_s=DEADLINE_S)
    await client.start()
    try:
        assert transport.process is not None
        assert await asyncio.wait_for(transport.process.proc.wait(), DEADLINE_S) == 2

        async def explained() -> bool:
            return any("state file" in line for line in transport.stderr_lines)

        await wait_until(explained, DEADLINE_S, "the refusal on stderr")
    finally:
        await client.aclose()
