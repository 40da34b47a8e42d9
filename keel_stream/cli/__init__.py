"""The `keel-stream` command: one module per command group.

Every failure a user can act on ends in one line, `error [code]: message`, on stderr and a
non-zero exit status (keel_stream.cli.errors).
"""

from __future__ import annotations

from typing import Annotated

import typer

from keel_stream import __version__
from keel_stream.cli import (
    api,
    dev,
    hooks,
    migrate,
    projections,
    relay,
    sessions,
    tail,
    tenants,
    topics,
    triggers,
    verify,
    worker,
)
from keel_stream.cli.errors import KeelGroup
from keel_stream.cli.sidecar import sidecar_ref

__all__ = ["app", "main"]

# Plain tracebacks for bugs: typer's pretty ones print local variables (DSNs, API keys).
app = typer.Typer(
    cls=KeelGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"keel-stream {__version__}")
        raise typer.Exit


@app.callback()
def keel_stream(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """keel-stream: the event ledger for agent sessions (PostgreSQL, Kafka, projections, API)."""


app.command("migrate")(migrate.migrate)
app.add_typer(topics.app, name="topics")
app.command("relay")(relay.relay)
app.command("republish")(relay.republish_command)
app.command("tail")(tail.tail_command)
app.command("verify")(verify.verify_command)
app.add_typer(projections.app, name="projections")
app.command("worker")(worker.worker)
app.command("api")(api.api)
app.add_typer(tenants.tenants_app, name="tenants")
app.add_typer(tenants.keys_app, name="keys")
app.add_typer(sessions.app, name="sessions")
app.command("dev")(dev.dev)
app.add_typer(hooks.app, name="hooks")
app.add_typer(triggers.app, name="triggers")
app.command("sidecar-ref")(sidecar_ref)


def main() -> None:
    """Console-script entry point."""
    app()
