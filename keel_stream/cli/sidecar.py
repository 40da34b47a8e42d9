"""`keel-stream sidecar-ref`: the reference sidecar of the external gateway protocol."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer

__all__ = ["sidecar_ref"]


class Kind(StrEnum):
    agent = "agent"
    tool = "tool"


def _names(value: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in value.split(",") if name.strip())


def sidecar_ref(
    kind: Annotated[Kind, typer.Option(help="Provider kind: AgentBackend or ToolProvider.")] = (
        Kind.agent
    ),
    http: Annotated[
        int | None, typer.Option(help="Serve Streamable HTTP on 127.0.0.1:PORT (0: any).")
    ] = None,
    slow_ms: Annotated[int, typer.Option(min=0, help="Delay before each streamed event.")] = 0,
    ignore_cancel: Annotated[bool, typer.Option(help="Answer cancel with an error.")] = False,
    crash_after: Annotated[
        int | None, typer.Option(min=0, help="Exit abruptly after N messages.")
    ] = None,
    hang_handshake: Annotated[bool, typer.Option(help="Never answer initialize.")] = False,
    version_override: Annotated[
        str | None, typer.Option(help="Announce this protocol version instead.")
    ] = None,
    forbid_env: Annotated[str, typer.Option(help="Refuse to start if any is set: A,B.")] = "",
    require_env: Annotated[str, typer.Option(help="Refuse to start unless all are set.")] = "",
    grandchildren: Annotated[
        int, typer.Option(min=0, help="Spawn N sleeping grandchild processes.")
    ] = 0,
    usage: Annotated[bool, typer.Option(help="Report usage (metering=external).")] = True,
    state_file: Annotated[
        str | None, typer.Option(help="Keep sessions in this file (resumable after a restart).")
    ] = None,
    ignore_stdin_eof: Annotated[
        bool, typer.Option(help="Keep running after stdin closes (a misbehaving provider).")
    ] = False,
) -> None:
    """Run the reference sidecar on stdio (or on Streamable HTTP with --http PORT)."""
    # Imported here: loading the CLI must not load the gateway (and its error classes).
    from keel_stream.gateway.protocol import ProviderKind
    from keel_stream.gateway.sidecar_core import SidecarOptions
    from keel_stream.gateway.sidecar_ref import run
    from keel_stream.settings import process_environ

    options = SidecarOptions(
        kind=ProviderKind.AGENT if kind is Kind.agent else ProviderKind.TOOL,
        slow_ms=slow_ms,
        ignore_cancel=ignore_cancel,
        crash_after=crash_after,
        hang_handshake=hang_handshake,
        version_override=version_override,
        forbid_env=_names(forbid_env),
        require_env=_names(require_env),
        grandchildren=grandchildren,
        state_file=state_file,
        ignore_stdin_eof=ignore_stdin_eof,
        usage=usage,
        http_port=http,
    )
    status = run(options, process_environ())
    if status:
        raise typer.Exit(status)
