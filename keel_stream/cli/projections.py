"""`keel-stream projections run|rebuild|prune|status|parked|unpark`: the read models."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated

import typer
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from keel_stream.cli.options import (
    PROJECTIONS,
    Bootstrap,
    DatabaseUrl,
    MetricsHost,
    MetricsPort,
    load_settings,
    optional_kafka,
    require_database,
    require_kafka,
)
from keel_stream.cli.output import print_table
from keel_stream.cli.service import Daemon
from keel_stream.kafka.errors import kafka_translated
from keel_stream.store import opened_store

if TYPE_CHECKING:
    from keel_stream.projector.rebuild import Progress as RebuildProgress

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="The read models (Faust projections).")

# The projector modules import Faust, which is slow to load: they are imported by the commands
# that use them, so the rest of the CLI starts quickly.


@app.command("run")
def run(
    database_url: DatabaseUrl = None,
    bootstrap: Bootstrap = None,
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = None,
) -> None:
    """Run the Faust worker that keeps the read models live (until SIGTERM)."""
    from keel_stream.projector.host import HostConfig, run_worker

    settings = load_settings(
        database_url=database_url,
        kafka_bootstrap=bootstrap,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
    )
    Daemon(settings).preflight()  # the Faust worker serves its metrics and owns its signals
    run_worker(
        HostConfig(
            database_url=require_database(settings),
            kafka=require_kafka(settings),
            topic_prefix=settings.topic_prefix,
            data_dir=settings.data_dir,
            batch_size=settings.projector_batch_size,
            reconcile_every_s=settings.projector_reconcile_every_s,
            reconcile_idle_s=settings.projector_reconcile_idle_s,
            metrics_host=settings.metrics_host,
            metrics_port=settings.metrics_port,
        )
    )


@contextmanager
def _progress_bar(name: str) -> Iterator[Callable[[RebuildProgress], None]]:
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn(
            "{task.completed:,.0f} events  {task.fields[rate]:,.0f}/s  lag {task.fields[lag]}"
        ),
        TimeElapsedColumn(),
    )
    with Progress(*columns, transient=False) as bar:
        task = bar.add_task(f"rebuild {name}", total=None, rate=0.0, lag="?")

        def show(progress: RebuildProgress) -> None:
            total = None if progress.lag is None else progress.events + progress.lag
            bar.update(
                task,
                completed=progress.events,
                total=total,
                rate=progress.events_per_s,
                lag=progress.lag if progress.lag is not None else "?",
            )

        yield show


Name = Annotated[
    str,
    typer.Argument(
        metavar=PROJECTIONS.metavar,
        callback=PROJECTIONS.one,
        help="The read model.",
        show_default=False,
    ),
]


@app.command("rebuild")
def rebuild(name: Name, database_url: DatabaseUrl = None, bootstrap: Bootstrap = None) -> None:
    """Replay from offset zero into a new generation; switch readers once it has caught up."""
    from keel_stream.projector.rebuild import rebuild as rebuild_projection

    settings = load_settings(database_url=database_url, kafka_bootstrap=bootstrap)
    dsn, servers = require_database(settings), require_kafka(settings)

    async def work() -> str:
        async with opened_store(dsn) as backend, kafka_translated(f"rebuild {name}"):
            with _progress_bar(name) as show:
                report = await rebuild_projection(
                    backend.projections(),
                    servers,
                    name,
                    topic_prefix=settings.topic_prefix,
                    on_progress=show,
                )
        return (
            f"{report.projection}: generation {report.generation} is live "
            f"({report.events} events, {report.sessions} sessions, "
            f"{report.healed_from_ledger} from the ledger, {report.seconds:.1f}s)"
        )

    typer.echo(asyncio.run(work()))


@app.command("prune")
def prune(
    name: Annotated[
        str | None,
        typer.Argument(
            metavar=PROJECTIONS.metavar, callback=PROJECTIONS.one, help="Only this read model."
        ),
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Delete retired generations (left behind by rebuilds); the live one is never touched."""
    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> str:
        async with opened_store(dsn) as backend:
            report = await backend.admin().prune(name)
        return f"pruned {report.generations} retired generations ({report.states} states)"

    typer.echo(asyncio.run(work()))


@app.command("status")
def status(database_url: DatabaseUrl = None, bootstrap: Bootstrap = None) -> None:
    """Each projection's generations, stored offsets, lag and sessions behind the ledger."""
    from keel_stream.projector.status import projection_status

    settings = load_settings(database_url=database_url, kafka_bootstrap=bootstrap)
    dsn = require_database(settings)

    async def work() -> None:
        async with opened_store(dsn, max_size=2) as backend, kafka_translated("read offsets"):
            store = backend.projections()
            rows = await projection_status(store, optional_kafka(settings), settings.topic_prefix)
        print_table(
            ["projection", "gen", "status", "sessions", "behind", "parked", "lag", "offsets"],
            (
                [
                    r.projection,
                    r.generation,
                    r.status,
                    r.sessions,
                    r.sessions_behind_ledger,
                    r.parked,
                    "?" if r.lag is None else r.lag,
                    " ".join(f"{p}:{o}" for p, o in sorted(r.offsets.items())),
                ]
                for r in rows
            ),
            numeric=["gen", "sessions", "behind", "parked", "lag"],
        )

    asyncio.run(work())


OnlyProjection = Annotated[
    str | None,
    typer.Argument(
        metavar=PROJECTIONS.metavar, callback=PROJECTIONS.one, help="Only this read model."
    ),
]


@app.command("parked")
def parked(name: OnlyProjection = None, database_url: DatabaseUrl = None) -> None:
    """Sessions a projection could not apply: where each stopped, why, and its tries."""
    from keel_stream.projector.status import parked_sessions

    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> None:
        async with opened_store(dsn, max_size=1) as backend:
            rows = await parked_sessions(backend.projections(), name)
        print_table(
            ["projection", "gen", "tenant", "session", "seq", "tries", "due", "error"],
            (
                [
                    r.projection,
                    r.generation,
                    r.tenant,
                    r.session,
                    r.seq,
                    r.attempts,
                    "yes" if r.due else "no",
                    r.error,
                ]
                for r in rows
            ),
            numeric=["gen", "seq", "tries"],
        )

    asyncio.run(work())


@app.command("unpark")
def unpark(
    name: OnlyProjection = None,
    tenant: Annotated[str | None, typer.Option(help="Only this tenant's sessions.")] = None,
    session: Annotated[str | None, typer.Option(help="Only this session.")] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Try parked sessions again now: the projector applies them from the ledger on its next
    reconcile tick (and parks them again if they still fail)."""
    from keel_stream.projector.status import unpark as unpark_sessions

    dsn = require_database(load_settings(database_url=database_url))

    async def work() -> int:
        async with opened_store(dsn, max_size=1) as backend:
            return await unpark_sessions(backend.projections(), name, tenant, session)

    typer.echo(f"unparked {asyncio.run(work())} sessions")
