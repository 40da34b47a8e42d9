"""Tools and providers are bounded: a call's arguments are checked against the tool's schema
before it runs (non-finite numbers, bounds, types, required fields), every call has a timeout,
and a provider stream that stalls or runs too long is cut."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from keel_stream.gateway.jsonrpc import Message, Request
from keel_stream.gateway.protocol import Method
from keel_stream.gateway.transport import Transport
from keel_stream.plugins.tool_arguments import ArgumentsCheck, SchemaError, non_finite
from keel_stream.retry import RetryPolicy
from keel_stream.settings import KeelSettings
from keel_stream.tenancy.document import ToolSpec
from keel_stream.worker.limits import StreamLimits, ToolLimits
from keel_stream.worker.providers import (
    FakeProvider,
    Finish,
    ProviderRequest,
    TextDelta,
    ToolCall,
)
from keel_stream.worker.providers.base import json_object
from keel_stream.worker.providers.chat_wire import ChatStream
from keel_stream.worker.providers.retry import Failure, retry_pause
from keel_stream.worker.tool_providers import ProviderConnection, ToolProviders
from keel_stream.worker.toolbox import Toolbox
from keel_stream.worker.tools import BuiltinContext, run_tool
from tests.support.tool_transports import LoopbackTransport

GUARD_S = 10.0
"""How long a check may wait before it counts as hung (today's main hangs on NaN)."""
FAST = ToolLimits(timeout_s=0.2)


async def run(toolbox: Toolbox, name: str, arguments: Any) -> tuple[str, bool]:
    return await asyncio.wait_for(toolbox.run(name, arguments), GUARD_S)


# -- arguments are checked before a tool runs ---------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ({"seconds": math.nan}, "arguments.seconds is nan, not a finite number"),
        ({"seconds": math.inf}, "arguments.seconds is inf, not a finite number"),
        ({"seconds": -math.inf}, "arguments.seconds is -inf, not a finite number"),
        ({"seconds": -1}, "arguments.seconds: -1 is less than the minimum of 0"),
        ({"seconds": 301}, "arguments.seconds: 301 is greater than the maximum of 300"),
        ({"seconds": "soon"}, "arguments.seconds: 'soon' is not of type 'number'"),
        ({"seconds": True}, "arguments.seconds: True is not of type 'number'"),
    ],
)
async def test_sleep_refuses_what_it_must_not_wait_for(arguments: Any, why: str) -> None:
    text, is_error = await run(Toolbox(limits=FAST), "sleep", arguments)
    assert is_error
    assert text == f"invalid arguments for tool 'sleep' (it was not run): {why}"


async def test_a_refused_call_is_not_run(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    toolbox = Toolbox(limits=ToolLimits(timeout_s=GUARD_S), builtins=BuiltinContext(notes))
    text, is_error = await run(toolbox, "note", {"text": "x", "sleep_ms": math.nan})
    assert is_error
    assert "arguments.sleep_ms is nan, not a finite number" in text
    text, is_error = await run(toolbox, "note", {"sleep_ms": 1})
    assert (text, is_error) == (
        "invalid arguments for tool 'note' (it was not run): "
        "arguments: 'text' is a required property",
        True,
    )
    assert not notes.exists(), "a refused call has no side effect"
    assert await run(toolbox, "note", {"text": "kept", "sleep_ms": 1}) == ("noted: kept", False)
    assert notes.read_text() == "kept\n"


async def test_nested_non_finite_numbers_and_non_objects_are_refused() -> None:
    toolbox = Toolbox(limits=FAST)
    text, is_error = await run(toolbox, "echo", {"x": [1, {"y": -math.inf}]})
    assert is_error
    assert text.endswith("arguments.x[1].y is -inf, not a finite number")
    assert await run(toolbox, "echo", [1, 2]) == ("tool arguments must be a JSON object", True)
    assert await run(toolbox, "echo", {"x": [1.5]}) == ('{"x": [1.5]}', False)
    assert non_finite({"a": [0.0, 1e308]}) is None


async def test_every_problem_is_named_up_to_three() -> None:
    schema = {
        "type": "object",
        "properties": {k: {"type": "integer"} for k in "abcd"},
        "required": ["z"],
    }
    problem = ArgumentsCheck(schema).problem("t", {"a": "1", "b": "2", "c": "3", "d": "4"})
    assert problem is not None
    assert problem.startswith("invalid arguments for tool 't' (it was not run): arguments: ")
    assert problem.endswith(" (and 2 more)")


def test_a_schema_that_is_not_a_json_schema_is_refused() -> None:
    with pytest.raises(SchemaError):
        ArgumentsCheck({"type": 5})
    assert ArgumentsCheck(None).problem("t", {"any": "thing"}) is None


async def test_run_tool_itself_checks_the_arguments() -> None:
    text, is_error = await asyncio.wait_for(run_tool("sleep", {"seconds": math.nan}), GUARD_S)
    assert is_error
    assert "not a finite number" in text


@pytest.mark.parametrize("raw", ['{"s": NaN}', '{"s": -Infinity}', '{"s": 1e999}', "[1]"])
def test_model_arguments_that_are_not_strict_json_objects_are_kept_as_sent(raw: str) -> None:
    assert json_object(raw) is None
    stream = ChatStream()
    call = {"index": 0, "id": "c1", "function": {"name": "sleep", "arguments": raw}}
    stream.feed(json.dumps({"choices": [{"delta": {"tool_calls": [call]}}]}))
    assert stream.tool_calls() == [ToolCall("c1", "sleep", {}, invalid_arguments=raw)]
    assert json_object('{"s": 1e308, "t": [0.5]}') == {"s": 1e308, "t": [0.5]}


async def test_the_fake_provider_keeps_a_nan_call_as_sent() -> None:
    provider = FakeProvider(limits=StreamLimits(stall_s=5, total_s=GUARD_S))
    events = await events_of(provider, '[[tool:sleep {"seconds": NaN}]] go')
    assert events[0] == ToolCall("call-g1", "sleep", {}, invalid_arguments='{"seconds": NaN}')


# -- every call has a timeout ---------------------------------------------------------------------


async def test_a_builtin_call_that_takes_too_long_is_an_error_result() -> None:
    toolbox = Toolbox(limits=FAST)
    slow = asyncio.create_task(toolbox.run("sleep", {"seconds": 30}))
    # The loop is free while the call waits: another call completes meanwhile.
    assert await run(toolbox, "echo", {"x": 1}) == ('{"x": 1}', False)
    assert not slow.done()
    assert await asyncio.wait_for(slow, GUARD_S) == ("tool 'sleep' timed out after 0.2 s", True)


def test_limits_are_finite_and_positive() -> None:
    for bad in (math.nan, math.inf, 0.0, -1.0):
        with pytest.raises(ValueError, match="finite number of seconds above 0"):
            ToolLimits(timeout_s=bad)
        with pytest.raises(ValueError, match="finite number of seconds above 0"):
            StreamLimits(stall_s=bad)
    for setting in ("tool_timeout_s", "provider_stall_timeout_s", "provider_request_timeout_s"):
        for bad_text in ("nan", "inf", "0"):
            with pytest.raises(ValidationError):
                KeelSettings.model_validate({setting: bad_text})


def test_limits_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEEL_TOOL_TIMEOUT_S", "2.5")
    monkeypatch.setenv("KEEL_PROVIDER_STALL_TIMEOUT_S", "7")
    monkeypatch.setenv("KEEL_PROVIDER_REQUEST_TIMEOUT_S", "90")
    settings = KeelSettings()
    assert ToolLimits.from_settings(settings) == ToolLimits(2.5)
    assert StreamLimits.from_settings(settings) == StreamLimits(7.0, 90.0)
    assert Toolbox(limits=ToolLimits.from_settings(settings)).timeout_s("sleep") == 2.5


def test_a_component_given_no_limits_never_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KEEL_TOOL_TIMEOUT_S", "2.5")
    monkeypatch.setenv("KEEL_PROVIDER_STALL_TIMEOUT_S", "7")
    assert Toolbox().timeout_s("sleep") == ToolLimits().timeout_s
    assert FakeProvider()._limits == StreamLimits()


class SilentTools:
    """A TransportFactory whose providers are the reference sidecar, except that a tools.call
    of a tool named in ``silent`` is never answered."""

    def __init__(self, silent: set[str]) -> None:
        self.silent = silent
        self.made: list[LoopbackTransport] = []

    def __call__(self, name: str, spec: ToolSpec, environ: Mapping[str, str]) -> Transport:
        factory = self

        class Silent(LoopbackTransport):
            async def send(self, message: Message) -> None:
                if (
                    isinstance(message, Request)
                    and message.method == Method.TOOLS_CALL
                    and (message.params or {}).get("name") in factory.silent
                ):
                    self.sent.append(message)
                    return
                await super().send(message)

        transport = Silent({})
        self.made.append(transport)
        return transport

    def calls(self) -> list[Any]:
        return [
            m.params
            for t in self.made
            for m in t.sent
            if isinstance(m, Request) and m.method == Method.TOOLS_CALL
        ]


def declared(timeout_ms: int | None = None) -> ToolSpec:
    spec: dict[str, Any] = {"transport": "stdio", "command": "unused"}
    if timeout_ms is not None:
        spec["timeoutMs"] = timeout_ms
    return ToolSpec.model_validate(spec)


async def test_a_provider_tool_that_does_not_answer_times_out_and_the_connection_lives_on() -> None:
    made = SilentTools({"upper"})
    providers = ToolProviders({}, made)
    toolbox = Toolbox(providers.for_tenant("acme", {"docs": declared()}), FAST)
    await toolbox.specs()
    assert toolbox.timeout_s("docs__upper") == 0.2, "no timeoutMs: KEEL_TOOL_TIMEOUT_S applies"
    text, is_error = await run(toolbox, "docs__upper", {"text": "x"})
    assert (text, is_error) == ("tool 'upper' of provider 'docs' timed out after 0.2 s", True)
    assert await run(toolbox, "docs__add", {"a": 1, "b": 2}) == ("3", False)
    assert len(made.made) == 1, "a timed-out call keeps the connection"
    await providers.aclose()


async def test_a_providers_declared_timeout_overrides_the_setting() -> None:
    made = SilentTools({"upper"})
    providers = ToolProviders({}, made)
    toolbox = Toolbox(providers.for_tenant("acme", {"docs": declared(300)}), FAST)
    await toolbox.specs()
    assert toolbox.timeout_s("docs__upper") == 0.3
    assert toolbox.timeout_s("sleep") == 0.2
    text, is_error = await run(toolbox, "docs__upper", {"text": "x"})
    assert (text, is_error) == ("tool 'upper' of provider 'docs' timed out after 0.3 s", True)
    await providers.aclose()


async def test_the_gateway_request_gets_the_calls_timeout() -> None:
    made = SilentTools({"upper"})
    connection = ProviderConnection("acme", "docs", declared(), {}, transports=made)
    text, is_error = await asyncio.wait_for(connection.call("upper", {"text": "x"}, 0.1), GUARD_S)
    assert (text, is_error) == ("tool 'upper' of provider 'docs' timed out after 0.1 s", True)
    await connection.aclose()


async def test_provider_tool_arguments_are_checked_against_its_input_schema() -> None:
    made = SilentTools(set())
    providers = ToolProviders({}, made)
    toolbox = Toolbox(providers.for_tenant("acme", {"docs": declared()}), FAST)
    await toolbox.specs()
    text, is_error = await run(toolbox, "docs__add", {"a": "one", "b": 2})
    assert is_error
    assert text == (
        "invalid arguments for tool 'docs__add' (it was not run): "
        "arguments.a: 'one' is not of type 'number'"
    )
    text, is_error = await run(toolbox, "docs__add", {"a": math.nan, "b": 2})
    assert is_error
    assert "arguments.a is nan, not a finite number" in text
    text, is_error = await run(toolbox, "docs__add", {"a": 1})
    assert is_error
    assert "'b' is a required property" in text
    assert made.calls() == [], "the provider was never called with refused arguments"
    assert await run(toolbox, "docs__add", {"a": 1, "b": 2}) == ("3", False)
    await providers.aclose()


# -- a provider stream that stalls or runs too long is cut ----------------------------------------


async def events_of(provider: FakeProvider, text: str) -> list[Any]:
    request = ProviderRequest("t", "s", "g1", [{"role": "user", "content": text}])

    async def collect() -> list[Any]:
        return [e async for e in provider.stream(request)]

    return await asyncio.wait_for(collect(), GUARD_S)


async def test_a_fake_stream_that_stalls_is_cut_with_a_retriable_error() -> None:
    provider = FakeProvider(limits=StreamLimits(stall_s=0.2, total_s=GUARD_S))
    events = await events_of(provider, "[[slow:60000]] hi there")
    (finish,) = events
    assert isinstance(finish, Finish)
    assert finish.stop_reason == "error"
    assert finish.error == "fake provider: the stream stalled: nothing for 0.2 s"
    assert finish.retriable


async def test_a_fake_stream_that_runs_too_long_is_cut() -> None:
    provider = FakeProvider(limits=StreamLimits(stall_s=5, total_s=0.3))
    events = await events_of(provider, "[[slow:100]] " + " ".join(["word"] * 50))
    finish = events[-1]
    assert isinstance(finish, Finish)
    assert finish.error == "fake provider: no complete answer within 0.3 s"
    assert finish.retriable
    assert all(isinstance(e, TextDelta) for e in events[:-1])
    assert len(events) < 50


async def test_a_fake_stream_within_its_limits_is_whole() -> None:
    provider = FakeProvider(limits=StreamLimits(stall_s=5, total_s=GUARD_S))
    events = await events_of(provider, "[[slow:1]] hi")
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["echo:", " hi"]
    assert isinstance(events[-1], Finish)
    assert events[-1].stop_reason == "end_turn"


async def test_no_retry_pause_outlasts_the_requests_budget() -> None:
    failure = Failure("HTTP 503", 503, retriable=True, retry_after_s=5.0)
    policy = RetryPolicy(attempts=4, max_retry_after_s=30)
    assert not await asyncio.wait_for(retry_pause(policy, failure, 1, budget_s=1.0), GUARD_S)
