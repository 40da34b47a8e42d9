"""The transport seam of the gateway client, and the stdio transport.

A transport moves whole JSON-RPC messages; the client owns ids, timeouts and dispatch.  The
framing is small and written here rather than borrowed: the ``mcp`` package's transports would
fit the wire (they carry raw JSON-RPC messages), but its stdio client validates every message
against MCP's own types, spawns the process its own way (no process-group reclaim of
grandchildren, no explicit-only environment) and its HTTP client adds MCP session semantics;
each would have to be worked around, and the package pulls in a dozen dependencies.

stdio framing: one JSON message per line on stdin/stdout (UTF-8, ``\\n``-terminated), at most
``max_line_bytes`` a line (KEEL_RPC_MAX_LINE_BYTES); stderr is captured line by line (each kept
line cut to ``STDERR_LINE_CHARS``) into ``stderr_lines`` and the ``keel_stream.gateway`` log.
When the provider's stdout closes (it crashed or exited) or it sends a longer line (it failed),
the reclaim of its process group starts at once, whether or not anyone closes the transport, and
the connection is lost (its pending requests fail); ``close`` awaits that same reclaim.  Both
pipes are read to their end even then (what follows a line over the limit is discarded): a pipe
left unread would keep the provider blocked, its buffer held, and the process unreaped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from keel_stream.errors import BackendUnavailable, GatewayError, ProtocolError
from keel_stream.gateway.audit import AuditLog
from keel_stream.gateway.jsonrpc import (
    DEFAULT_MAX_LINE_BYTES,
    Message,
    RequestId,
    decode,
    encode_line,
    over_the_limit,
)
from keel_stream.gateway.pidfiles import PidRegistry
from keel_stream.gateway.process import ProviderProcess
from keel_stream.tenancy.document import Budget

__all__ = ["STDERR_LINE_CHARS", "MessageSink", "StdioTransport", "Transport"]

log = logging.getLogger("keel_stream.gateway")

STDERR_LINE_CHARS = 2000
"""A provider's stderr line is kept and logged up to this many characters."""
_DISCARD_CHUNK = 1024 * 1024


async def _discard(stream: asyncio.StreamReader) -> None:
    """Read ``stream`` to its end, keeping nothing."""
    with contextlib.suppress(ConnectionError):
        while await stream.read(_DISCARD_CHUNK):
            pass


class MessageSink(Protocol):
    """What a transport reports to its client."""

    async def admit(self, message: Message) -> None:
        """Wait until ``message`` may be taken; nothing more is read meanwhile (backpressure:
        an event over its tenant's rate waits here)."""

    def on_message(self, message: Message) -> None: ...

    def on_malformed(self, error: ProtocolError) -> None: ...

    def on_request_failed(self, request_id: RequestId, error: GatewayError) -> None: ...

    def on_closed(self, reason: str) -> None: ...


class Transport(ABC):
    """Carries JSON-RPC messages to one provider and reports what comes back to a sink."""

    owns_provider: bool = False
    """Whether closing this transport ends the provider (a process this runtime started),
    rather than only this runtime's connection to a provider others may share."""

    @abstractmethod
    async def start(self, sink: MessageSink) -> None: ...

    @abstractmethod
    async def send(self, message: Message) -> None: ...

    @abstractmethod
    async def close(self) -> None: ...


class StdioTransport(Transport):
    """A provider spawned as a process; newline-delimited JSON on its stdin and stdout."""

    owns_provider = True

    def __init__(
        self,
        command: Sequence[str],
        env: Mapping[str, str],
        *,
        cwd: str | None = None,
        grace_s: float = 2.0,
        term_s: float = 2.0,
        stderr_keep: int = 200,
        name: str | None = None,
        kind: str | None = None,
        budget: Budget | None = None,
        declared_env: Mapping[str, str] | None = None,
        audit: AuditLog | None = None,
        registry: PidRegistry | None = None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        declared_command: Sequence[str] | None = None,
    ) -> None:
        """``name``, ``kind``, ``budget``, ``declared_env``, ``declared_command``, ``audit``
        and ``registry`` are handed to ProviderProcess.spawn (a budget refusal propagates as
        BudgetRefused)."""
        self.command = list(command)
        self.max_line_bytes = max_line_bytes
        self.env = dict(env)
        self.cwd = cwd
        self.grace_s = grace_s
        self.term_s = term_s
        self.stderr_lines: deque[str] = deque(maxlen=stderr_keep)
        self.process: ProviderProcess | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._reclaim: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()
        self._spawn_options: dict[str, Any] = {
            "name": name,
            "kind": kind,
            "budget": budget,
            "declared_env": declared_env,
            "declared_command": declared_command,
            "audit": audit,
            "registry": registry,
            "line_limit": max_line_bytes,
        }

    @property
    def pgid(self) -> int | None:
        return None if self.process is None else self.process.pgid

    async def start(self, sink: MessageSink) -> None:
        try:
            self.process = await ProviderProcess.spawn(
                self.command, self.env, self.cwd, **self._spawn_options
            )
        except OSError as exc:
            raise BackendUnavailable(f"cannot start provider {self.command[0]!r}: {exc}") from exc
        self._tasks = [
            asyncio.create_task(self._read_stdout(sink)),
            asyncio.create_task(self._read_stderr()),
        ]

    async def _read_stdout(self, sink: MessageSink) -> None:
        assert self.process is not None
        assert self.process.proc.stdout is not None
        stdout = self.process.proc.stdout
        reason = "the provider closed its stdout"
        try:
            while line := await stdout.readline():
                if not line.strip():
                    continue
                try:
                    message = decode(line)
                except ProtocolError as exc:
                    sink.on_malformed(exc)
                    continue
                await sink.admit(message)
                sink.on_message(message)
        except ValueError:  # asyncio's word for a line over the stream's limit
            reason = over_the_limit(self.max_line_bytes)
            log.warning("stdio provider failed: %s", reason)
        except ConnectionError as exc:
            log.warning("stdio provider stdout failed: %s", exc)
        # Lost: its group (grandchildren included) is reclaimed now, not when someone closes
        # this transport; a close awaits this same reclaim, so a reconnect comes after it.
        self._reclaiming(reason)
        sink.on_closed(reason)
        await _discard(stdout)

    async def _read_stderr(self) -> None:
        assert self.process is not None
        assert self.process.proc.stderr is not None
        stderr = self.process.proc.stderr
        while True:
            try:
                line = await stderr.readline()
            except ValueError:
                line = f"[a stderr line over {self.max_line_bytes} bytes was dropped]".encode()
            except ConnectionError:
                return
            if not line:
                return
            text = line.decode(errors="replace").rstrip()[:STDERR_LINE_CHARS]
            self.stderr_lines.append(text)
            log.info("provider stderr: %s", text)

    async def send(self, message: Message) -> None:
        if self.process is None or self.process.proc.stdin is None:
            raise GatewayError("the stdio transport is not started")
        stdin = self.process.proc.stdin
        async with self._write_lock:
            if stdin.is_closing():
                raise ConnectionError("the provider's stdin is closed")
            stdin.write(encode_line(message))
            await stdin.drain()

    def _reclaiming(self, reason: str) -> asyncio.Task[None]:
        """The one reclaim of the process group, started on the first call."""
        assert self.process is not None
        if self._reclaim is None:
            terminate = self.process.terminate(self.grace_s, self.term_s, reason)
            self._reclaim = asyncio.ensure_future(terminate)
        return self._reclaim

    async def close(self) -> None:
        """Close stdin, grace, SIGTERM the group, SIGKILL the group (or await that reclaim,
        begun when the provider was lost); then drain the readers."""
        if self.process is None:
            return
        await asyncio.shield(self._reclaiming("closed by the runtime"))
        # The group is gone, so its pipes end; a process that left the group may hold them
        # open, and nothing is left to wait for then.
        tasks, self._tasks = self._tasks, []
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.term_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
