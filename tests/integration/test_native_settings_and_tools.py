"""The native loop on a tenant's stored document: its model settings reach the chat-completions
request, and the tools of its ToolProviders (the reference sidecar over stdio) are offered to the
model, called over tools.call and committed as tool.result; a bad provider only loses its tools."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from keel_stream.kernel import CommitRequest, Event
from keel_stream.kernel.subagents import DELEGATE
from keel_stream.store import PostgresLedger
from keel_stream.store.tenant_configs import PostgresTenantConfigs
from keel_stream.worker.agent_settings import ModelProviders
from keel_stream.worker.providers import OpenAIProvider
from keel_stream.worker.tools import TOOLS
from tests.support.chat_server import ChatServer, Fault, chat_server
from tests.support.workers import log_of, settled, worker_task

SMART = {
    "provider": "openai",
    "model": "gpt-smart",
    "systemPrompt": "You are Keel's careful agent.",
    "temperature": 0.25,
    "maxTokens": 321,
}


def sidecar(state_file: Path, *switches: str) -> dict[str, Any]:
    """The reference ToolProvider over stdio; its state file names it in the process table."""
    args = ["-m", "keel_stream.gateway.sidecar_ref", "--kind", "tool"]
    return {
        "transport": "stdio",
        "command": sys.executable,
        "args": [*args, "--state-file", str(state_file), *switches],
        "timeoutMs": 20000,
    }


def processes_naming(marker: Path) -> list[int]:
    """Live processes whose command line names ``marker``."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if str(marker).encode() in cmdline:
            found.append(int(proc.name))
    return found


async def say(ledger: PostgresLedger, text: str, selection: dict[str, Any] | None = None) -> None:
    payload: dict[str, Any] = {"text": text}
    if selection is not None:
        payload["selection"] = selection
    request = CommitRequest(tenant_id="acme", session_id="s1", kind="user.message", payload=payload)
    await ledger.commit(request)


async def run_once(
    pool: asyncpg.Pool,
    ledger: PostgresLedger,
    dsn: str,
    script: list[Fault],
    text: str,
    selection: dict[str, Any] | None = None,
) -> tuple[list[Event], ChatServer]:
    """One input through a worker whose provider is the local chat server; the run's log."""
    async with chat_server() as (url, server):
        server.faults.extend(script)
        provider = OpenAIProvider(url, "sk-test", "local")
        models = ModelProviders(url, "sk-test")
        async with worker_task(dsn, provider=provider, model_providers=models):
            await say(ledger, text, selection)
            await settled(pool, "s1", "done", "failed")
    return await log_of(ledger, "s1"), server


def tool_names(request: dict[str, Any]) -> set[str]:
    return {tool["function"]["name"] for tool in request.get("tools", [])}


async def test_a_provider_tool_runs_on_the_tenants_model_settings(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    marker = tmp_path / "docs-state.json"
    monkeypatch.setenv("KEEL_SECRET_DOCS_TOKEN", "t0k")  # declared: reaches the provider
    monkeypatch.setenv("KEEL_NOT_FOR_TOOLS", "x")  # not declared: must not reach it
    switches = ("--require-env", "DOCS_TOKEN", "--forbid-env", "KEEL_NOT_FOR_TOOLS")
    docs = {**sidecar(marker, *switches), "env": {"DOCS_TOKEN": "secret:DOCS_TOKEN"}}
    version = await PostgresTenantConfigs(pool).put(
        "acme",
        {"external": {"tools": {"docs": docs}}, "settings": {"models": {"smart": SMART}}},
    )
    call = Fault(
        tool_name="docs__upper", tool_arguments='{"text": "hello keel"}', tool_call_id="c1"
    )
    events, server = await run_once(
        pool, ledger, database_dsn, [call], "shout it", {"model": "smart"}
    )
    assert not processes_naming(marker), "the worker closed its tool provider when it stopped"

    kinds = [e.kind for e in events]
    assert kinds == [
        "user.message", "assistant.message", "tool.result", "assistant.message", "run.finished",
    ]  # fmt: skip
    result = events[2].payload
    assert result["toolCallId"] == "c1"
    assert (result["content"], result["isError"]) == (
        [{"type": "text", "text": "HELLO KEEL"}],
        False,
    )
    assert events[3].payload["content"] == [{"type": "text", "text": "the answer is HELLO KEEL"}]

    settings = {"model": "smart", "configVersion": version}
    for answer in (events[1].payload, events[3].payload):
        assert (answer["provider"], answer["model"], answer["settings"]) == (
            "openai", "gpt-smart", settings,
        )  # fmt: skip
    summary = events[4].payload
    assert (summary["status"], summary["model"], summary["settings"]) == (
        "done",
        "gpt-smart",
        settings,
    )

    assert len(server.requests) == 2
    for request in server.requests:
        assert request["model"] == "gpt-smart"
        assert request["messages"][0] == {"role": "system", "content": SMART["systemPrompt"]}
        assert (request["temperature"], request["max_tokens"]) == (0.25, 321)
        assert tool_names(request) == {*TOOLS, DELEGATE, "docs__upper", "docs__add"}
    second = server.requests[1]
    upper = next(t["function"] for t in second["tools"] if t["function"]["name"] == "docs__upper")
    assert upper["description"] == "Upper-case a text."
    assert upper["parameters"]["properties"]["text"]["type"] == "string"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": "HELLO KEEL"}


async def test_a_provider_that_cannot_start_only_loses_its_tools(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    tmp_path: Path,
) -> None:
    marker = tmp_path / "docs-state.json"
    broken = {"transport": "stdio", "command": str(tmp_path / "no-such-tool-server")}
    await PostgresTenantConfigs(pool).put(
        "acme", {"external": {"tools": {"docs": sidecar(marker), "broken": broken}}}
    )
    events, server = await run_once(pool, ledger, database_dsn, [], "hello")
    assert not processes_naming(marker)
    assert [e.kind for e in events] == ["user.message", "assistant.message", "run.finished"]
    answer = events[1].payload
    assert answer["content"] == [{"type": "text", "text": "you said: hello"}]
    assert (answer["provider"], answer["model"]) == ("openai", "local")  # no models declared
    assert "settings" not in answer
    assert events[2].payload["status"] == "done"
    (request,) = server.requests
    assert tool_names(request) == {*TOOLS, DELEGATE, "docs__upper", "docs__add"}
    assert "temperature" not in request
    assert request["messages"][0]["role"] == "user"


async def test_a_provider_tool_error_is_an_error_result(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
    tmp_path: Path,
) -> None:
    marker = tmp_path / "docs-state.json"
    await PostgresTenantConfigs(pool).put(
        "acme", {"external": {"tools": {"docs": sidecar(marker)}}}
    )
    bad = Fault(tool_name="docs__add", tool_arguments='{"a": "one", "b": 2}', tool_call_id="c1")
    events, server = await run_once(pool, ledger, database_dsn, [bad], "add them")
    assert not processes_naming(marker)
    kinds = [e.kind for e in events]
    assert kinds == [
        "user.message", "assistant.message", "tool.result", "assistant.message", "run.finished",
    ]  # fmt: skip
    result = events[2].payload
    assert result["isError"] is True
    (block,) = result["content"]
    assert block["text"] == (
        "invalid arguments for tool 'docs__add' (it was not run): "
        "arguments.a: 'one' is not of type 'number'"
    )
    assert server.requests[1]["messages"][-1]["content"] == block["text"]
    assert events[4].payload["status"] == "done"


async def test_a_selection_of_an_undeclared_model_fails_the_run_once(
    ledger: PostgresLedger,
    pool: asyncpg.Pool,
    database_dsn: str,
    session: tuple[str, str],
) -> None:
    version = await PostgresTenantConfigs(pool).put(
        "acme", {"settings": {"models": {"smart": SMART}}}
    )
    events, server = await run_once(pool, ledger, database_dsn, [], "hi", {"model": "huge"})
    assert server.requests == [], "no model was asked"
    kinds = [e.kind for e in events]
    assert kinds == ["user.message", "assistant.message", "run.finished"], "one attempt, no retry"
    assert events[1].payload["stopReason"] == "error"
    summary = events[2].payload
    assert summary["status"] == "failed"
    assert "no model named 'huge' (smart)" in summary["error"]
    assert f"config version {version}" in summary["error"]
