"""`keel-stream sessions fork`: branch a session's log into a new session."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from keel_stream.cli.options import DatabaseUrl, load_settings, require_database
from keel_stream.kernel.forks import Fork
from keel_stream.store import opened_store

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="Sessions: fork one at a seq.")


@app.command("fork")
def fork(
    tenant: Annotated[str, typer.Argument(help="The tenant id.")],
    source: Annotated[str, typer.Argument(help="The session to fork.")],
    at_seq: Annotated[
        int | None,
        typer.Option("--at-seq", min=0, help="Copy the first N events (default: all of them)."),
    ] = None,
    session_id: Annotated[
        str | None, typer.Option("--id", help="The new session's id (default: generated).")
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Create a new session whose log starts with the source's first N events, re-committed
    through the kernel with their idempotency keys and provenance; no tool or model runs
    again. The new session owes a run only when its last input is unanswered."""
    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> Fork:
        async with opened_store(dsn, max_size=1) as store:
            return await store.ledger().fork(tenant, source, at_seq=at_seq, session_id=session_id)

    made = asyncio.run(work())
    owed = f", owes a run for input {made.owed_input_seq}" if made.owed_input_seq else ""
    typer.echo(f"forked {made.fork_of} at seq {made.at_seq} into {made.session_id}{owed}")
