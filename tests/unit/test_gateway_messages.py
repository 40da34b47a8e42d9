"""JSON-RPC framing, the protocol models, error mapping, and the client and sidecar in-process."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from pydantic import ValidationError

from keel_stream import errors as gw
from keel_stream.errors import KeelError
from keel_stream.gateway.client import GatewayClient, error_from_rpc
from keel_stream.gateway.jsonrpc import (
    ErrorResponse,
    Message,
    Notification,
    Request,
    Response,
    RpcError,
    decode,
    encode,
    encode_line,
    error_response,
)
from keel_stream.gateway.protocol import (
    AGENT_METHODS,
    PROTOCOL_VERSION,
    SUPPORTED_VERSIONS,
    TOOL_METHODS,
    ErrorCode,
    MessageSendParams,
    Method,
    ProviderKind,
    SessionOpenResult,
)
from keel_stream.gateway.sidecar_core import RefSidecar, SidecarOptions
from keel_stream.gateway.sidecar_ref import check_env, parse_args
from keel_stream.gateway.transport import MessageSink, StdioTransport, Transport
from tests.support.wait import wait_until


@pytest.mark.parametrize(
    "message",
    [
        Request(1, "health"),
        Request("a", "session.open", {"metadata": {"k": "v"}}),
        Notification("event.stream", {"seq": 1}),
        Response(7, {"ok": True}),
        Response("x", None),
        error_response(3, ErrorCode.UNAVAILABLE, "gone", {"sessionId": "s"}),
        error_response(None, ErrorCode.PARSE_ERROR, "bad"),
    ],
)
def test_messages_round_trip(message: Message) -> None:
    assert decode(encode(message)) == message
    line = encode_line(message)
    assert line.endswith(b"\n")
    assert line.count(b"\n") == 1
    assert json.loads(line)["jsonrpc"] == "2.0"


def test_a_notification_has_no_id_and_a_request_has_one() -> None:
    assert "id" not in json.loads(encode(Notification("event.stream")))
    assert json.loads(encode(Request(5, "cancel")))["id"] == 5


@pytest.mark.parametrize("raw", [b"{", b"not json", b"\xff\xfe", b""])
def test_unparseable_input_is_a_parse_error(raw: bytes) -> None:
    with pytest.raises(gw.ProtocolError) as caught:
        decode(raw)
    assert caught.value.rpc_code == -32700


@pytest.mark.parametrize(
    "raw",
    [
        [],
        [{"jsonrpc": "2.0", "id": 1, "method": "health"}],
        "text",
        {"id": 1, "method": "health"},
        {"jsonrpc": "1.0", "id": 1, "method": "health"},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "result": 1, "error": {"code": 1, "message": "m"}},
        {"jsonrpc": "2.0", "id": 1, "method": 3},
        {"jsonrpc": "2.0", "id": 1, "method": ""},
        {"jsonrpc": "2.0", "id": 1, "method": "m", "params": [1, 2]},
        {"jsonrpc": "2.0", "id": True, "method": "m"},
        {"jsonrpc": "2.0", "id": 1.5, "method": "m"},
        {"jsonrpc": "2.0", "result": 1},
        {"jsonrpc": "2.0", "id": None, "result": 1},
        {"jsonrpc": "2.0", "id": 1, "error": "boom"},
        {"jsonrpc": "2.0", "id": 1, "error": {"code": "x", "message": "m"}},
    ],
)
def test_malformed_messages_are_invalid_requests(raw: Any) -> None:
    with pytest.raises(gw.ProtocolError) as caught:
        decode(json.dumps(raw))
    assert caught.value.rpc_code == -32600


def test_an_invalid_request_keeps_its_id_for_the_answer() -> None:
    with pytest.raises(gw.ProtocolError) as caught:
        decode('{"jsonrpc":"2.0","id":"r1","method":"m","params":[]}')
    assert caught.value.data == {"id": "r1"}


def test_protocol_constants_and_method_sets() -> None:
    assert PROTOCOL_VERSION == "2026-11-07"
    assert SUPPORTED_VERSIONS == (PROTOCOL_VERSION,)
    assert [
        int(code) for code in (ErrorCode.TIMEOUT, ErrorCode.CANCELLED, ErrorCode.UNAVAILABLE)
    ] == [
        -32001,
        -32002,
        -32003,
    ]
    assert Method.TOOLS_CALL not in AGENT_METHODS
    assert Method.MESSAGE_SEND not in TOOL_METHODS
    shared = AGENT_METHODS & TOOL_METHODS
    assert shared == {Method.INITIALIZE, Method.HEALTH, Method.CLOSE}


def test_models_speak_camel_case_and_params_forbid_unknown_fields() -> None:
    params = MessageSendParams(session_id="s", text="t", timeout_ms=5)
    assert params.model_dump(by_alias=True, exclude_none=True) == {
        "sessionId": "s",
        "text": "t",
        "wait": False,
        "timeoutMs": 5,
    }
    with pytest.raises(ValidationError):
        MessageSendParams.model_validate({"sessionId": "s", "text": "t", "extra": 1})
    result = SessionOpenResult.model_validate(
        {"sessionId": "x", "stateOwner": "external", "metering": "none", "lastSeq": 0, "new": 1}
    )
    assert result.session_id == "x"
    with pytest.raises(ValidationError):
        SessionOpenResult.model_validate(
            {"sessionId": "x", "stateOwner": "keel", "metering": "none", "lastSeq": 0}
        )


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (-32001, gw.BackendTimeout),
        (-32002, gw.RequestCancelled),
        (-32003, gw.BackendUnavailable),
        (-32700, gw.ProtocolError),
        (-32600, gw.ProtocolError),
        (-32601, gw.ProtocolError),
        (-32602, gw.ProtocolError),
        (-32099, gw.RemoteError),
    ],
)
def test_rpc_errors_map_to_gateway_errors(code: int, cls: type[gw.GatewayError]) -> None:
    error = error_from_rpc(RpcError(code, "m", {"d": 1}))
    assert type(error) is cls
    assert (error.rpc_code, error.data, error.message) == (code, {"d": 1}, "m")


def test_gateway_errors_are_keel_errors_with_stable_codes() -> None:
    classes = [
        gw.GatewayError,
        gw.BackendTimeout,
        gw.RequestCancelled,
        gw.BackendUnavailable,
        gw.BackendCancelRefused,
        gw.ActivationRefused,
        gw.IncompatibleVersion,
        gw.WrongProviderKind,
        gw.ProtocolError,
        gw.RemoteError,
    ]
    codes = [cls.code for cls in classes]
    assert len(set(codes)) == len(codes)
    assert all(issubclass(cls, KeelError) for cls in classes)
    assert gw.BackendTimeout.retriable
    assert gw.BackendUnavailable.retriable
    assert not gw.BackendCancelRefused.retriable


class FakeTransport(Transport):
    """Answers through a callback; records what was sent."""

    def __init__(self, answer: dict[str, Any] | None) -> None:
        self.answer = answer
        self.sink: MessageSink | None = None
        self.sent: list[Message] = []

    async def start(self, sink: MessageSink) -> None:
        self.sink = sink

    async def send(self, message: Message) -> None:
        self.sent.append(message)
        if self.answer is not None and isinstance(message, Request) and self.sink is not None:
            self.sink.on_message(Response(message.id, self.answer))

    async def close(self) -> None:
        return None


def _init_result(version: str = PROTOCOL_VERSION, kind: str = "AgentBackend") -> dict[str, Any]:
    return {"protocolVersion": version, "kind": kind, "serverInfo": {"name": "f", "version": "1"}}


async def test_a_request_without_answer_times_out_as_minus_32001() -> None:
    client = GatewayClient(FakeTransport(None), ProviderKind.AGENT)
    await client.start()
    with pytest.raises(gw.BackendTimeout) as caught:
        await client.initialize(timeout_s=0.05)
    assert caught.value.rpc_code == -32001


async def test_initialize_activates_only_a_compatible_provider() -> None:
    ok = GatewayClient(FakeTransport(_init_result()), ProviderKind.AGENT)
    await ok.start()
    assert (await ok.initialize()).protocol_version == PROTOCOL_VERSION
    old = GatewayClient(FakeTransport(_init_result("1999-01-01")), ProviderKind.AGENT)
    await old.start()
    with pytest.raises(gw.IncompatibleVersion):
        await old.initialize()
    tool = GatewayClient(FakeTransport(_init_result(kind="ToolProvider")), ProviderKind.AGENT)
    await tool.start()
    with pytest.raises(gw.WrongProviderKind):
        await tool.initialize()
    with pytest.raises(gw.ProtocolError):
        await tool.health()


async def test_a_lost_connection_fails_pending_and_later_requests() -> None:
    transport = FakeTransport(None)
    client = GatewayClient(transport, ProviderKind.AGENT)
    await client.start()
    pending = asyncio.create_task(client.initialize())

    async def sent() -> bool:
        return bool(transport.sent)

    await wait_until(sent, 5.0, "the request to be sent")
    client.on_closed("eof")
    with pytest.raises(gw.BackendUnavailable):
        await pending
    with pytest.raises(gw.BackendUnavailable):
        await client.initialize()


async def test_notifications_reach_the_event_handlers() -> None:
    client = GatewayClient(FakeTransport(None), ProviderKind.AGENT)
    seen: list[Any] = []
    raw: list[Notification] = []
    client.on_event(seen.append)
    client.on_notification(raw.append)
    client.on_message(Notification("event.stream", {"sessionId": "s", "seq": 1, "type": "t"}))
    client.on_message(Notification("event.stream", {"broken": True}))
    client.on_message(Notification("other", {}))
    assert [event.type for event in seen] == ["t"]
    assert len(raw) == 3


async def _ask(sidecar: RefSidecar, raw: str) -> Message | None:
    return (await sidecar.handle(raw)).response


async def test_the_sidecar_answers_protocol_errors() -> None:
    sidecar = RefSidecar(SidecarOptions())
    parse = await _ask(sidecar, "{oops")
    assert isinstance(parse, ErrorResponse)
    assert (parse.id, parse.error.code) == (None, -32700)
    invalid = await _ask(sidecar, '{"jsonrpc":"2.0","id":4,"method":"m","params":[1]}')
    assert isinstance(invalid, ErrorResponse)
    assert (invalid.id, invalid.error.code) == (4, -32600)
    unknown = await _ask(sidecar, '{"jsonrpc":"2.0","id":5,"method":"tools.call"}')
    assert isinstance(unknown, ErrorResponse)
    assert unknown.error.code == -32601
    bad = await _ask(sidecar, '{"jsonrpc":"2.0","id":6,"method":"message.send","params":{}}')
    assert isinstance(bad, ErrorResponse)
    assert bad.error.code == -32602
    assert await _ask(sidecar, '{"jsonrpc":"2.0","method":"health"}') is None


def test_sidecar_switches_parse() -> None:
    options = parse_args(
        ["--kind", "tool", "--slow-ms", "5", "--forbid-env", "A,B", "--no-usage", "--http", "0"]
    )
    assert options.kind is ProviderKind.TOOL
    assert (options.slow_ms, options.forbid_env, options.usage, options.http_port) == (
        5,
        ("A", "B"),
        False,
        0,
    )
    assert parse_args([]).usage


def test_the_environment_check() -> None:
    options = SidecarOptions(forbid_env=("SECRET",), require_env=("MODEL",))
    assert check_env(options, {"MODEL": "m"}) is None
    assert "SECRET" in (check_env(options, {"MODEL": "m", "SECRET": "s"}) or "")
    assert "MODEL" in (check_env(options, {}) or "")


async def test_a_provider_that_cannot_be_started_is_unavailable() -> None:
    client = GatewayClient(StdioTransport(["/nonexistent/sidecar"], {}), ProviderKind.AGENT)
    with pytest.raises(gw.BackendUnavailable):
        await client.start()
