"""The pure parts of issue 13's bounds: the body limit (an ASGI middleware), the JSON and NUL
rules of the body parser and the kernel, and the settings the limits come from."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from keel_stream.api.limits import ApiLimits, BodyLimit
from keel_stream.api.submissions import parse_json_body
from keel_stream.errors import InvalidIdentifier, InvalidPayload, InvalidRequest
from keel_stream.kernel import CommitRequest, Kind, canonical_json, prepare, validate_payload
from keel_stream.settings import KeelSettings

NON_FINITE = [float("nan"), float("inf"), float("-inf")]


@pytest.mark.parametrize("number", NON_FINITE)
def test_the_kernel_refuses_a_number_json_cannot_hold(number: float) -> None:
    for payload in ({"text": "hi", "score": number}, {"deep": [{"x": [number]}]}):
        with pytest.raises(InvalidPayload) as info:
            validate_payload(Kind.USER_MESSAGE, payload)
        assert info.value.error_code == "payload_not_json"
    with pytest.raises(ValueError, match="not a JSON number"):
        canonical_json({"n": number})


def test_finite_floats_keep_their_canonical_form() -> None:
    assert canonical_json({"a": 1.0, "b": 1.5, "c": -0.0}) == b'{"a":1,"b":1.5,"c":0}'


def test_the_kernel_refuses_a_key_with_a_nul() -> None:
    request = CommitRequest(
        tenant_id="acme", session_id="s1", kind="user.message", payload={}, key="a\x00b"
    )
    with pytest.raises(InvalidIdentifier):
        prepare(request)


@pytest.mark.parametrize("number", [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e999"])
def test_the_parser_answers_payload_not_json_for_a_number_json_cannot_hold(number: bytes) -> None:
    with pytest.raises(InvalidPayload) as info:
        parse_json_body(b'{"n": [1, ' + number + b"]}", "application/json")
    assert info.value.error_code == "payload_not_json"


@pytest.mark.parametrize("raw", [b"{oops", b"", b"[" * 5000, b'{"text": "\xff"}'])
def test_a_body_that_is_not_json_text_stays_invalid_request(raw: bytes) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_json_body(raw, "application/json")
    assert info.value.error_code == "invalid_request"


def test_the_limits_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ApiLimits.from_settings(KeelSettings()) == ApiLimits()
    monkeypatch.setenv("KEEL_API_MAX_BODY_BYTES", "65536")
    monkeypatch.setenv("KEEL_API_HEADER_TIMEOUT_S", "2.5")
    monkeypatch.setenv("KEEL_API_BODY_TIMEOUT_S", "4")
    monkeypatch.setenv("KEEL_API_MAX_CONNECTIONS", "10")
    monkeypatch.setenv("KEEL_API_BACKLOG", "16")
    assert ApiLimits.from_settings(KeelSettings()) == ApiLimits(65536, 2.5, 4.0, 10, 16)


# -- the BodyLimit middleware, driven by hand --


class Exchange:
    """One request through BodyLimit: what the client sends, what the app and client get."""

    def __init__(self, messages: list[Message], headers: list[tuple[bytes, bytes]]) -> None:
        self.scope: Scope = {"type": "http", "method": "POST", "path": "/", "headers": headers}
        self._messages: Iterator[Message] = iter(messages)
        self.received = 0
        self.sent: list[Message] = []
        self.app_body: bytes | None = None

    async def receive(self) -> Message:
        self.received += 1
        try:
            return next(self._messages)
        except StopIteration:
            await asyncio.Event().wait()  # a client that sends nothing more
            raise AssertionError("unreachable") from None

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = await receive()
        self.app_body = message["body"]
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def run(self, limits: ApiLimits) -> None:
        await BodyLimit(self.app, limits)(self.scope, self.receive, self.send)

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def error(self) -> Any:
        return json.loads(self.sent[1]["body"])["error"]


def chunks(*parts: bytes) -> list[Message]:
    return [
        {"type": "http.request", "body": part, "more_body": i < len(parts) - 1}
        for i, part in enumerate(parts)
    ]


async def test_a_declared_length_over_the_limit_is_refused_without_reading() -> None:
    exchange = Exchange(chunks(b"x" * 10), [(b"content-length", b"2000")])
    await exchange.run(ApiLimits(max_body_bytes=1024))
    assert (exchange.status, exchange.error["code"]) == (413, "payload_too_large")
    assert exchange.received == 0
    assert exchange.app_body is None


async def test_a_body_without_a_length_is_cut_at_the_chunk_that_passes_the_limit() -> None:
    parts = [b"x" * 400] * 10
    exchange = Exchange(chunks(*parts), [])
    await exchange.run(ApiLimits(max_body_bytes=1024))
    assert (exchange.status, exchange.error["code"]) == (413, "payload_too_large")
    assert exchange.received == 3, "read up to the chunk that passed 1024 bytes, no further"
    assert exchange.app_body is None


async def test_a_body_within_the_limit_reaches_the_app_whole() -> None:
    exchange = Exchange(chunks(b"ab", b"cd", b"ef"), [])
    await exchange.run(ApiLimits(max_body_bytes=6))
    assert exchange.app_body == b"abcdef"
    assert exchange.status == 204


async def test_a_body_that_stops_arriving_is_408() -> None:
    exchange = Exchange([{"type": "http.request", "body": b"ab", "more_body": True}], [])
    await exchange.run(ApiLimits(body_timeout_s=0.05))
    assert (exchange.status, exchange.error["code"]) == (408, "request_timeout")
    assert (b"connection", b"close") in exchange.sent[0]["headers"]
    assert exchange.app_body is None


async def test_a_client_gone_mid_body_gets_nothing() -> None:
    exchange = Exchange([*chunks(b"ab", b"cd")[:1], {"type": "http.disconnect"}], [])
    await exchange.run(ApiLimits())
    assert exchange.sent == []
    assert exchange.app_body is None
