"""The clients of the chaos run: steady input through the API, answers watched over SSE.

Each session has a feeder that posts one user message every `interval_s` to
`POST /v1/sessions/{id}/events` with a requestId of its own, and retries it with the same
requestId after any error or timeout until it is acknowledged (2xx): the idempotency key is what
makes a retry safe, so nothing may be lost or duplicated however often the API, the database or
the broker go away under it. A client's outage is the time from the first failed attempt of an
input to its acknowledgement. Each session also has an SSE reader that resumes after the last
seq it saw; an input is answered when a completed (not failed) assistant.message lists its seq
in `inputSeqs`, and its latency runs from its acknowledgement to that frame.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

import httpx
import orjson

from keel_stream.kernel.inputs import is_terminal_failure

__all__ = ["Input", "Load", "SessionLoad"]

_RETRY_S: Final = 0.25
_REQUEST_TIMEOUT_S: Final = 5.0


@dataclass
class Input:
    session: str
    request_id: str
    phase: str
    first_try: float
    acked_at: float | None = None
    seq: int | None = None


@dataclass
class SessionLoad:
    id: str
    inputs: list[Input] = field(default_factory=list)
    answered: dict[int, float] = field(default_factory=dict)
    """input seq -> when the answer to it reached the SSE reader"""
    user_seqs: set[int] = field(default_factory=set)
    outage: tuple[float, float] = (0.0, 0.0)
    """the longest outage this client saw: (length, when it began)"""
    outage_errors: tuple[str, ...] = ()
    """what its attempts met during that outage, in order (repeats folded)"""
    failures: Counter[str] = field(default_factory=Counter)
    stream_gaps: int = 0
    """seqs the SSE reader never saw although it saw a later one (resuming after each drop)"""
    stream_duplicates: int = 0
    """frames whose seq the SSE reader had seen already"""


class Load:
    """N sessions fed steadily; `phase` labels the inputs started from now on."""

    def __init__(self, api_url: str, key: str, sessions: int, interval_s: float) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        limits = httpx.Limits(max_connections=sessions + 20, max_keepalive_connections=sessions)
        timeout = httpx.Timeout(_REQUEST_TIMEOUT_S)
        self._client = httpx.AsyncClient(
            base_url=api_url, headers=headers, limits=limits, timeout=timeout
        )
        self._streams = httpx.AsyncClient(
            base_url=api_url,
            headers=headers,
            limits=limits,
            timeout=httpx.Timeout(_REQUEST_TIMEOUT_S, read=30.0),
        )
        self.count = sessions
        self.interval_s = interval_s
        self.sessions: list[SessionLoad] = []
        self.phase = "baseline"
        self.epoch = time.monotonic()
        self.give_up_at = float("inf")
        self._feeding = asyncio.Event()
        self._feeders: list[asyncio.Task[None]] = []
        self._readers: list[asyncio.Task[None]] = []

    @property
    def client(self) -> httpx.AsyncClient:
        return self._client

    async def open_sessions(self) -> None:
        for index in range(self.count):
            response = await self._until_ok("POST", "/v1/sessions", {"id": f"chaos-{index:04d}"})
            self.sessions.append(SessionLoad(response.json()["id"]))

    async def _until_ok(self, method: str, path: str, body: dict[str, Any]) -> httpx.Response:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                response = await self._client.request(method, path, json=body)
                if response.is_success:
                    return response
            if time.monotonic() > deadline:
                raise RuntimeError(f"{method} {path} kept failing")
            await asyncio.sleep(_RETRY_S)

    def start(self) -> None:
        self._feeding.set()
        for index, session in enumerate(self.sessions):
            offset = self.interval_s * index / max(1, self.count)
            self._feeders.append(asyncio.create_task(self._feed(session, offset)))
            self._readers.append(asyncio.create_task(self._read(session)))

    async def stop_feeding(self, give_up_s: float) -> None:
        """No new inputs; the ones in flight are retried until acknowledged or give_up_s."""
        self._feeding.clear()
        self.give_up_at = time.monotonic() + give_up_s
        await asyncio.gather(*self._feeders)

    async def close(self) -> None:
        for task in [*self._feeders, *self._readers]:
            task.cancel()
        await asyncio.gather(*self._feeders, *self._readers, return_exceptions=True)
        await self._client.aclose()
        await self._streams.aclose()

    async def _feed(self, session: SessionLoad, offset_s: float) -> None:
        next_at = time.monotonic() + offset_s
        number = 0
        while self._feeding.is_set():
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if not self._feeding.is_set():
                return
            number += 1
            item = Input(session.id, f"{session.id}-{number:05d}", self.phase, time.monotonic())
            session.inputs.append(item)
            await self._submit(session, item, f"chaos input {number} of {session.id}")
            next_at = max(next_at + self.interval_s, time.monotonic())

    async def _submit(self, session: SessionLoad, item: Input, text: str) -> None:
        body = {"kind": "user.message", "payload": {"text": text}, "requestId": item.request_id}
        failing_since: float | None = None
        errors: list[str] = []
        while True:
            started = time.monotonic()
            try:
                response = await self._client.post(f"/v1/sessions/{session.id}/events", json=body)
                if response.is_success:
                    item.seq = int(response.json()["seq"])
                    item.acked_at = time.monotonic()
                    if failing_since is not None:
                        self._outage(session, failing_since, item.acked_at, errors)
                    return
                error = f"http {response.status_code}"
            except httpx.HTTPError as exc:
                error = type(exc).__name__
            session.failures[error] += 1
            if not errors or errors[-1] != error:
                errors.append(error)
            failing_since = started if failing_since is None else failing_since
            if time.monotonic() > self.give_up_at:
                return
            await asyncio.sleep(_RETRY_S)

    def _outage(self, session: SessionLoad, began: float, ended: float, errors: list[str]) -> None:
        if ended - began > session.outage[0]:
            session.outage = (ended - began, began - self.epoch)
            session.outage_errors = tuple(errors)

    async def _read(self, session: SessionLoad) -> None:
        last = 0
        while True:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                path = f"/v1/sessions/{session.id}/events/stream"
                resume = {"Last-Event-ID": str(last)}
                async with self._streams.stream("GET", path, headers=resume) as response:
                    if response.status_code == 200:
                        last = await self._frames(session, response, last)
            await asyncio.sleep(_RETRY_S)

    async def _frames(self, session: SessionLoad, response: httpx.Response, last: int) -> int:
        seq: int | None = None
        kind = ""
        async for line in response.aiter_lines():
            if line.startswith("id: "):
                seq = int(line[4:])
            elif line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: ") and seq is not None:
                if seq <= last:
                    session.stream_duplicates += 1
                    continue
                session.stream_gaps += seq - last - 1
                self._on_event(session, seq, kind, orjson.loads(line[6:]).get("payload") or {})
                last, seq = seq, None
        return last

    def _on_event(self, session: SessionLoad, seq: int, kind: str, payload: Any) -> None:
        now = time.monotonic()
        if kind == "user.message":
            session.user_seqs.add(seq)
        elif kind == "assistant.message" and not is_terminal_failure(payload):
            listed = payload.get("inputSeqs")
            covered = (
                listed if isinstance(listed, list) else [s for s in session.user_seqs if s < seq]
            )
            for input_seq in covered:
                session.answered.setdefault(int(input_seq), now)

    def unanswered_by_stream(self) -> int:
        return sum(
            1
            for session in self.sessions
            for item in session.inputs
            if item.seq is not None and item.seq not in session.answered
        )
