"""One request cannot freeze or pin the api process (issue 13): body limit and off-loop parse,
numbers JSON cannot hold, NUL, slow clients, the connection limit, SSE clients that drop."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import logging.handlers
import os
import shutil
import socket
import struct
import tempfile
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from fastapi import FastAPI

from keel_stream.api import submissions
from keel_stream.api.app import ApiConfig
from keel_stream.api.hub import LiveHub
from keel_stream.api.limits import ApiLimits
from keel_stream.api.server import DrainingServer, api_server
from keel_stream.kafka.broker import free_port
from keel_stream.settings import KeelSettings
from keel_stream.store import PostgresLedger, create_pool
from keel_stream.store.keys import PostgresKeyStore
from tests.support.wait import wait_until

KIB = 1024


@dataclass
class Served:
    url: str
    key: str
    port: int
    server: DrainingServer

    def client(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.key}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30)

    @property
    def hub(self) -> LiveHub:
        app = self.server.config.app
        assert isinstance(app, FastAPI)
        return cast(LiveHub, app.state.services.hub)

    @property
    def connections(self) -> int:
        return len(self.server.server_state.connections)


@contextlib.asynccontextmanager
async def serve(
    dsn: str, limits: ApiLimits | None = None, heartbeat_s: float = 15.0
) -> AsyncIterator[Served]:
    pool = await create_pool(dsn, max_size=1)
    try:
        await PostgresLedger(pool).create_tenant("acme")
        _, key = await PostgresKeyStore(pool).create("acme")
    finally:
        await pool.close()
    config = ApiConfig(
        dsn,
        heartbeat_s=heartbeat_s,
        limits=limits or ApiLimits(),
        settings=KeelSettings(),
        environ=os.environ,
    )
    config.data_dir = Path(tempfile.mkdtemp(prefix="keel-limits-"))
    port = free_port()
    server = api_server(config, "127.0.0.1", port)
    task = asyncio.create_task(server.serve())
    ready = asyncio.create_task(server.ready.wait())
    await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    try:
        yield Served(f"http://127.0.0.1:{port}", key, port, server)
    finally:
        config.draining.set()
        server.should_exit = True
        await asyncio.wait_for(task, 30)
        shutil.rmtree(config.data_dir, ignore_errors=True)


async def new_session(served: Served) -> str:
    async with served.client() as client:
        response = await client.post("/v1/sessions")
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


async def last_seq(served: Served, sid: str) -> int:
    async with served.client() as client:
        return int((await client.get(f"/v1/sessions/{sid}")).json()["lastSeq"])


def code_of(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, str(response.json()["error"]["code"])


@dataclass
class RawResponse:
    status: int
    code: str


async def read_response(reader: asyncio.StreamReader) -> RawResponse:
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
    length = int(head.split("content-length:")[1].split("\r\n")[0])
    body = json.loads(await reader.readexactly(length))
    return RawResponse(int(head.split()[1]), str(body["error"]["code"]))


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """True once the server has closed the connection (EOF, or a reset)."""
    try:
        return await reader.read(1) == b""
    except ConnectionResetError:
        return True


def released(served: Served) -> Callable[[], Awaitable[bool]]:
    async def no_connection_left() -> bool:
        return served.connections == 0

    return no_connection_left


def request_head(served: Served, method: str, path: str, *headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: test", f"Authorization: Bearer {served.key}"]
    return ("\r\n".join([*lines, *headers]) + "\r\n\r\n").encode()


def post_head(served: Served, path: str, framing: str) -> bytes:
    return request_head(served, "POST", path, "Content-Type: application/json", framing)


async def answer_then_close(reader: asyncio.StreamReader) -> RawResponse:
    """The server's answer; then it closes the connection (at once, or after a deadline)."""
    response = await asyncio.wait_for(read_response(reader), 10)
    assert await asyncio.wait_for(closed_by_server(reader), 10), "the connection is closed"
    return response


# -- 1. the body limit, enforced before parsing, and the parse off the event loop --


async def test_a_body_declared_over_the_limit_is_refused_unread(database_dsn: str) -> None:
    # The default limit (1 MiB): a body declared at 10 MiB is refused before it is sent; what
    # the client would still send is dropped until the body's deadline, then it is cut off.
    async with serve(database_dsn, ApiLimits(body_timeout_s=0.5)) as served:
        sid = await new_session(served)
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        head = post_head(served, f"/v1/sessions/{sid}/input", f"Content-Length: {10240 * KIB}")
        writer.write(head + b'{"text": "x", "n": [1, 1, 1')
        response = await answer_then_close(reader)
        assert (response.status, response.code) == (413, "payload_too_large")
        writer.close()
        assert await last_seq(served, sid) == 0


async def test_a_chunked_body_is_cut_as_soon_as_it_passes_the_limit(database_dsn: str) -> None:
    limits = ApiLimits(max_body_bytes=64 * KIB, body_timeout_s=0.5)
    async with serve(database_dsn, limits) as served:
        sid = await new_session(served)
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        writer.write(post_head(served, f"/v1/sessions/{sid}/input", "Transfer-Encoding: chunked"))
        chunk = b"1," * (8 * KIB)
        for _ in range(5):  # 80 KiB, and the body never ends
            writer.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
        response = await answer_then_close(reader)
        assert (response.status, response.code) == (413, "payload_too_large")
        writer.close()
        assert await last_seq(served, sid) == 0


async def test_bodies_up_to_the_limit_are_served(database_dsn: str) -> None:
    async with serve(database_dsn, ApiLimits(max_body_bytes=64 * KIB)) as served:
        sid = await new_session(served)
        at_limit = b'{"text": "' + b"x" * (64 * KIB - len(b'{"text": ""}')) + b'"}'
        over = at_limit[:-2] + b'x"}'
        json_body = {"content-type": "application/json"}
        async with served.client() as client:
            path = f"/v1/sessions/{sid}/input"
            served_at_limit = await client.post(path, content=at_limit, headers=json_body)
            assert served_at_limit.status_code == 201, served_at_limit.text
            refused = await client.post(path, content=over, headers=json_body)
            assert code_of(refused) == (413, "payload_too_large")
            # Refused while the client is still sending: it reads the 413, not a reset.
            huge = await client.post(path, content=over * 64, headers=json_body)
            assert code_of(huge) == (413, "payload_too_large")
            created = await client.post("/v1/sessions", json={"id": "x" * (70 * KIB)})
            assert code_of(created) == (413, "payload_too_large"), "every route has the limit"


async def test_a_large_body_is_parsed_off_the_event_loop(
    database_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """/healthz answers while a large body is being parsed: the parse waits (in its thread)
    until /healthz has answered; on the event loop it would block /healthz instead."""
    parsing = threading.Event()
    healthz_answered = threading.Event()
    answered_during_parse: list[bool] = []
    parse = submissions.parse_json_body

    def slow_parse(raw: bytes, content_type: str | None) -> Any:
        parsing.set()
        answered_during_parse.append(healthz_answered.wait(timeout=10))
        return parse(raw, content_type)

    monkeypatch.setattr(submissions, "parse_json_body", slow_parse)
    async with serve(database_dsn) as served:
        sid = await new_session(served)
        body = {"text": "big", "numbers": list(range(40_000))}  # ~250 KiB
        async with served.client() as client, served.client() as probe:
            post = asyncio.create_task(client.post(f"/v1/sessions/{sid}/input", json=body))

            async def parse_started() -> bool:
                return parsing.is_set()

            await wait_until(parse_started, 10, "the big body's parse to start")
            healthz = await probe.get("/healthz")
            healthz_answered.set()
            assert healthz.status_code == 200
            assert (await post).status_code == 201
    assert answered_during_parse == [True], "/healthz answered while the parse was running"


# -- 2. numbers JSON cannot hold --


async def test_numbers_json_cannot_hold_are_payload_not_json_at_both_doors(
    database_dsn: str,
) -> None:
    async with serve(database_dsn) as served:
        sid = await new_session(served)
        json_body = {"content-type": "application/json"}
        async with served.client() as client:
            for number in (b"NaN", b"Infinity", b"-Infinity", b"1e400", b"-1e400"):
                payload = b'{"text": "hi", "score": [' + number + b"]}"
                event = b'{"kind": "user.message", "payload": ' + payload + b"}"
                at_input = await client.post(
                    f"/v1/sessions/{sid}/input", content=payload, headers=json_body
                )
                at_events = await client.post(
                    f"/v1/sessions/{sid}/events", content=event, headers=json_body
                )
                assert code_of(at_input) == code_of(at_events) == (400, "payload_not_json")
        assert await last_seq(served, sid) == 0, "nothing is stored, not even as null"


# -- 3. NUL, which PostgreSQL text and jsonb cannot hold --


async def test_a_nul_never_reaches_postgresql(database_dsn: str) -> None:
    async with serve(database_dsn) as served:
        sid = await new_session(served)
        edge = {"kind": "user.message", "payload": {"text": "hi"}}
        posts: list[tuple[str, Any, str]] = [
            (f"/v1/sessions/{sid}/events", {**edge, "requestId": "a\u0000b"}, "invalid_identifier"),
            (
                f"/v1/sessions/{sid}/input",
                {"text": "hi", "requestId": "a\u0000"},
                "payload_not_json",
            ),
            (f"/v1/sessions/{sid}/input", {"text": "a\u0000b"}, "payload_not_json"),
            (f"/v1/sessions/{sid}/input", {"meta": {"k\u0000": ["v"]}}, "payload_not_json"),
            ("/v1/sessions", {"id": "s\u0000"}, "invalid_identifier"),
        ]
        gets = [f"/v1/sessions/a%00b{tail}" for tail in ("", "/events", "/transcript", "/status")]
        async with served.client() as client:
            for path, body, code in posts:
                response = await client.post(path, json=body)
                assert code_of(response) == (400, code), (path, body, response.text)
            for path in [*gets, f"{gets[0]}/events/stream"]:
                response = await client.get(path)
                assert code_of(response) == (400, "invalid_identifier"), (path, response.text)
            cursor = await client.get("/v1/sessions", params={"cursor": "a\u0000b"})
            assert code_of(cursor) == (400, "invalid_request")
        assert await last_seq(served, sid) == 0


# -- 4. slow clients and the connection limit --


async def test_headers_sent_a_byte_at_a_time_are_cut_at_the_deadline(database_dsn: str) -> None:
    async with serve(database_dsn, ApiLimits(header_timeout_s=0.5)) as served:
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)

        async def trickle() -> None:
            # Each byte would restart uvicorn's keep-alive timer; the deadline does not move.
            for byte in request_head(served, "GET", "/healthz") * 100:
                writer.write(bytes([byte]))
                await asyncio.sleep(0.05)

        sending = asyncio.create_task(trickle())
        try:
            response = await answer_then_close(reader)
            assert (response.status, response.code) == (408, "request_timeout")
        finally:
            sending.cancel()
            writer.close()
        await wait_until(released(served), 10, "the server to drop the connection")
        # A connection that sends nothing at all is closed at the same deadline.
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        response = await answer_then_close(reader)
        assert (response.status, response.code) == (408, "request_timeout")
        writer.close()


async def test_a_body_that_stops_midway_is_cut_at_the_deadline(database_dsn: str) -> None:
    async with serve(database_dsn, ApiLimits(body_timeout_s=0.5)) as served:
        sid = await new_session(served)
        reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
        head = post_head(served, f"/v1/sessions/{sid}/input", "Content-Length: 100")
        writer.write(head + b'{"text": "never fin')
        response = await answer_then_close(reader)
        assert (response.status, response.code) == (408, "request_timeout")
        writer.close()
        await wait_until(released(served), 10, "the server to drop the connection")
        assert await last_seq(served, sid) == 0


async def test_connections_over_the_limit_are_refused_with_503(database_dsn: str) -> None:
    async with serve(database_dsn, ApiLimits(max_connections=2)) as served:
        sid = await new_session(served)
        await wait_until(released(served), 10, "the session's connection to close")
        path = f"/v1/sessions/{sid}/events/stream"
        async with contextlib.AsyncExitStack() as streams:
            for _ in range(2):
                client = await streams.enter_async_context(served.client())
                response = await streams.enter_async_context(client.stream("GET", path))
                assert response.status_code == 200
            async with httpx.AsyncClient(base_url=served.url) as other:
                busy = await other.get("/healthz")
            assert code_of(busy) == (503, "server_busy")
            assert busy.json()["error"]["retriable"] is True
            assert busy.headers["retry-after"] == "1"

        async def served_again() -> bool:
            async with httpx.AsyncClient(base_url=served.url) as client:
                return (await client.get("/healthz")).status_code == 200

        await wait_until(served_again, 10, "a free connection once the streams closed")


# -- 5. SSE clients that drop --


@contextlib.contextmanager
def error_lines() -> Iterator[list[logging.LogRecord]]:
    """Every error-level record logged meanwhile (asyncio's and uvicorn's included)."""
    handler = logging.handlers.BufferingHandler(capacity=100_000)
    handler.setLevel(logging.ERROR)
    loggers = [logging.getLogger(name) for name in ("", "asyncio", "uvicorn", "uvicorn.error")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield handler.buffer
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


async def test_dropped_sse_clients_log_no_error_and_leave_no_subscriber(
    database_dsn: str,
) -> None:
    async with serve(database_dsn, heartbeat_s=0.2) as served:
        sid = await new_session(served)
        head = request_head(served, "GET", f"/v1/sessions/{sid}/events/stream")

        async def open_and_drop() -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(head)
            await writer.drain()
            # After a heartbeat the stream waits for its next signal, where a drop leaked.
            await asyncio.wait_for(reader.readuntil(b"heartbeat"), 10)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()  # a reset, not a goodbye

        with error_lines() as errors:
            await asyncio.gather(*(open_and_drop() for _ in range(40)))

            async def unsubscribed() -> bool:
                return served.hub.streams == 0

            await wait_until(unsubscribed, 10, "every stream to leave the hub")
            gc.collect()  # a task destroyed while pending is reported when it is collected
        assert {r.getMessage() for r in errors} == set()
