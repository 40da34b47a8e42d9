"""ToolProviders in-process, for the worker's tool connections without spawning anything: the
reference sidecar's core answers each request, a scripted answer can replace a tool's, and a
transport can be killed (its connection lost) or refuse to start."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from keel_stream.errors import BackendUnavailable
from keel_stream.gateway.jsonrpc import Message, Request, Response, encode
from keel_stream.gateway.protocol import Method, ProviderKind
from keel_stream.gateway.sidecar_core import RefSidecar, SidecarOptions
from keel_stream.gateway.transport import MessageSink, Transport
from keel_stream.tenancy.document import ToolSpec


class LoopbackTransport(Transport):
    """The reference ToolProvider (tools ``upper`` and ``add``) behind a transport."""

    def __init__(self, answers: Mapping[str, Any], broken: bool = False) -> None:
        self.sidecar = RefSidecar(SidecarOptions(kind=ProviderKind.TOOL))
        self.answers = answers
        """tools.call results (the raw result object) by tool name, instead of the sidecar's."""
        self.broken = broken
        self.sink: MessageSink | None = None
        self.sent: list[Message] = []
        self.closed = False

    async def start(self, sink: MessageSink) -> None:
        if self.broken:
            raise BackendUnavailable("cannot start provider: scripted to fail")
        self.sink = sink

    async def send(self, message: Message) -> None:
        if self.closed or self.sink is None:
            raise ConnectionError("the provider is gone")
        self.sent.append(message)
        if not isinstance(message, Request):
            return
        name = str((message.params or {}).get("name"))
        if message.method == Method.TOOLS_CALL and name in self.answers:
            self.sink.on_message(Response(message.id, self.answers[name]))
            return
        outcome = await self.sidecar.handle(encode(message))
        if outcome.response is not None:
            self.sink.on_message(outcome.response)

    def kill(self) -> None:
        """The provider dies: the client hears its connection is lost."""
        self.closed = True
        if self.sink is not None:
            self.sink.on_closed("the provider closed its stdout")

    async def close(self) -> None:
        self.closed = True


class LoopbackProviders:
    """A TransportFactory for ToolProviders: a fresh LoopbackTransport per connection made;
    providers named in ``broken`` refuse to start."""

    def __init__(
        self, answers: Mapping[str, Any] | None = None, broken: set[str] | None = None
    ) -> None:
        self.answers = dict(answers or {})
        self.broken = set(broken or ())
        self.made: list[tuple[str, LoopbackTransport]] = []

    def __call__(self, name: str, spec: ToolSpec, environ: Mapping[str, str]) -> Transport:
        transport = LoopbackTransport(self.answers, broken=name in self.broken)
        self.made.append((name, transport))
        return transport

    def latest(self, name: str) -> LoopbackTransport:
        return [t for n, t in self.made if n == name][-1]
