"""`keel-stream verify`: the events topic and the read models checked against the ledger."""

from __future__ import annotations

import asyncio
from typing import Annotated

import orjson
import typer

from keel_stream.cli.errors import EXIT_FAILED
from keel_stream.cli.options import (
    Bootstrap,
    DatabaseUrl,
    load_settings,
    require_database,
    require_kafka,
)
from keel_stream.cli.output import print_table
from keel_stream.store import opened_store
from keel_stream.verify import Scope, VerifyOptions, VerifyReport, verify

__all__ = ["verify_command"]


def verify_command(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's sessions.")] = None,
    session: Annotated[
        str | None,
        typer.Option(help="Only the sessions with this id (one session with --tenant)."),
    ] = None,
    wait: Annotated[
        float,
        typer.Option(
            min=0,
            help="Longest wait in seconds, in all, for the outbox to drain and the read models "
            "to catch up.",
        ),
    ] = 30.0,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print the report as one JSON document.")
    ] = False,
    fail_on_duplicates: Annotated[
        bool,
        typer.Option(
            "--fail-on-duplicates",
            help="Count duplicate records as failures (consumers de-duplicate them otherwise).",
        ),
    ] = False,
    max_differences: Annotated[
        int,
        typer.Option(min=0, help="List at most this many failures (the counts are always whole)."),
    ] = 100,
    database_url: DatabaseUrl = None,
    bootstrap: Bootstrap = None,
) -> None:
    """Check that keel.events.v1 holds every ledger event once, in order, and that every read
    model equals the fold of the ledger (exit 1 on any difference)."""
    settings = load_settings(database_url=database_url, kafka_bootstrap=bootstrap)
    dsn, servers = require_database(settings), require_kafka(settings)
    options = VerifyOptions(
        scope=Scope(tenant, session),
        topic_prefix=settings.topic_prefix,
        wait_s=wait,
        fail_on_duplicates=fail_on_duplicates,
        keep=max_differences,
    )

    async def work() -> VerifyReport:
        async with opened_store(dsn, max_size=2) as store:
            return await verify(store.verify_reads(), servers, options)

    report = asyncio.run(work())
    if json_output:
        typer.echo(orjson.dumps(report.as_json(), option=orjson.OPT_INDENT_2).decode())
    else:
        _print(report)
    if not report.ok:
        raise typer.Exit(code=EXIT_FAILED)


def _print(report: VerifyReport) -> None:
    print_table(
        ["check", "count", "result"],
        ([r.check, r.count, r.result] for r in report.rows),
        numeric=["count"],
    )
    if report.failures or report.notes:
        typer.echo("")
    for difference in report.failures:
        typer.echo(difference.line())
    if report.unlisted:
        typer.echo(f"... and {report.unlisted} more failures (--max-differences)")
    for difference in report.notes:
        typer.echo(difference.line())
    verdict = "ok" if report.ok else f"FAILED ({report.failed} differences)"
    typer.echo(f"\nverify {report.topic}: {verdict}")
