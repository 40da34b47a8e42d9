"""`keel-stream topics apply|describe`: the topic catalog on the broker."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from keel_stream.cli.options import Bootstrap, load_settings, require_kafka
from keel_stream.cli.output import print_table
from keel_stream.kafka.admin import ApplyReport, PartitionState, apply_catalog, describe_topics
from keel_stream.kafka.errors import kafka_translated

__all__ = ["app"]

EXIT_DRIFT = 3

app = typer.Typer(no_args_is_help=True, help="The topic catalog on the broker.")


@app.command("apply")
def apply(bootstrap: Bootstrap = None) -> None:
    """Create missing topics and report configuration drift (exit 3 when there is some)."""
    settings = load_settings(kafka_bootstrap=bootstrap)
    servers = require_kafka(settings)

    async def work() -> ApplyReport:
        async with kafka_translated("apply topics"):
            return await apply_catalog(servers, settings.topic_prefix)

    report = asyncio.run(work())
    for name in report.created:
        typer.echo(f"created  {name}")
    for name in report.existing:
        typer.echo(f"exists   {name}")
    for line in report.drift:
        typer.echo(f"drift    {line}")
    if not report.clean:
        raise typer.Exit(code=EXIT_DRIFT)


@app.command("describe")
def describe(
    bootstrap: Bootstrap = None,
    group: Annotated[
        list[str] | None, typer.Option(help="Consumer group to show lag for (repeatable).")
    ] = None,
) -> None:
    """Partitions, offsets (log start, high-water) and consumer-group lag."""
    settings = load_settings(kafka_bootstrap=bootstrap)
    servers, groups = require_kafka(settings), group or []

    async def work() -> list[PartitionState]:
        async with kafka_translated("describe topics"):
            return await describe_topics(servers, settings.topic_prefix, groups)

    states = asyncio.run(work())
    lags = [f"lag:{g}" for g in groups]
    print_table(
        ["topic", "partition", "log start", "high-water", *lags],
        (
            [s.topic, s.partition, s.log_start, s.high_water, *(s.lag(g) for g in groups)]
            for s in states
        ),
        numeric=["partition", "log start", "high-water", *lags],
    )
