"""The bound on what a provider may send (KEEL_RPC_MAX_LINE_BYTES): its default, and the SSE
reader of the http transport, which keeps at most one bounded event."""

from __future__ import annotations

import httpx
import pytest

from keel_stream.gateway.http import _OverTheLimit, _sse_data
from keel_stream.gateway.jsonrpc import DEFAULT_MAX_LINE_BYTES
from keel_stream.settings import KeelSettings


def _stream(*chunks: bytes) -> httpx.Response:
    class Chunks(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[no-untyped-def]
            for chunk in chunks:
                yield chunk

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Chunks())


async def _events(response: httpx.Response, limit: int) -> list[bytes]:
    return [data async for data in _sse_data(response, limit)]


def test_the_line_limit_is_a_setting_with_the_gateways_default() -> None:
    assert KeelSettings().rpc_max_line_bytes == DEFAULT_MAX_LINE_BYTES == 8 * 1024 * 1024


async def test_sse_events_are_read_across_chunks_with_their_data_lines_joined() -> None:
    response = _stream(
        b': keep-alive\r\n\r\nevent: message\r\ndata: {"a"',
        b":1}\r\n\r\ndata: one\ndata:two\n\n",
        b"data: unfinished",
    )
    assert await _events(response, 64) == [b'{"a":1}', b"one\ntwo"]


@pytest.mark.parametrize(
    "chunks",
    [
        [b"data: " + b"x" * 100],  # one line, never ended
        [b"data: " + b"x" * 40 + b"\n", b"data: " + b"x" * 40 + b"\n"],  # one event's lines
    ],
)
async def test_an_sse_event_over_the_limit_fails_the_provider(chunks: list[bytes]) -> None:
    # The transport fails the request and the connection with BackendUnavailable on this
    # (tests/integration/test_provider_line_limit.py shows it end to end).
    with pytest.raises(_OverTheLimit) as caught:
        await _events(_stream(*chunks), 64)
    assert str(caught.value) == "the provider sent a line over 64 bytes"
