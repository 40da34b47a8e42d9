"""`keel-stream tail`: the reference analytics consumer, JSON lines on stdout."""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

import typer

from keel_stream.analytics.tail import TailOptions, tail
from keel_stream.cli.options import KINDS, Bootstrap, load_settings, require_kafka
from keel_stream.dev.signals import until_signalled
from keel_stream.errors import TopicMissing
from keel_stream.kafka.errors import kafka_translated
from keel_stream.topics.catalog import EVENTS

__all__ = ["tail_command"]


def tail_command(
    bootstrap: Bootstrap = None,
    from_beginning: Annotated[
        bool, typer.Option("--from-beginning/--from-end", help="Where a new group starts.")
    ] = True,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's events.")] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KIND", callback=KINDS.many, help=f"Only these (repeatable): {KINDS.listed}."
        ),
    ] = None,
    group: Annotated[str | None, typer.Option(help="Consumer group (default: a new one).")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="Stop after this many events.")] = None,
    no_dedupe: Annotated[bool, typer.Option("--no-dedupe", help="Show duplicates too.")] = False,
) -> None:
    """Print keel.events.v1 as JSON lines, de-duplicated by (tenant, session, seq)."""
    settings = load_settings(kafka_bootstrap=bootstrap)
    options = TailOptions(
        kafka=require_kafka(settings),
        topic=EVENTS.full_name(settings.topic_prefix),
        from_beginning=from_beginning,
        tenant=tenant,
        kinds=frozenset(kind or []),
        dedupe=not no_dedupe,
        limit=limit,
        **({"group": group} if group else {}),
    )

    def emit(line: bytes) -> None:
        sys.stdout.buffer.write(line + b"\n")
        sys.stdout.buffer.flush()

    async def body(stop: asyncio.Event) -> None:
        async with kafka_translated("tail"):
            await tail(options, emit, stop)

    try:
        asyncio.run(until_signalled(body))
    except LookupError as exc:
        raise TopicMissing(str(exc)) from exc
