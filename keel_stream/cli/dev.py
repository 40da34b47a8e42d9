"""`keel-stream dev`: the whole platform on embedded defaults."""

from __future__ import annotations

from typing import Annotated

import typer

from keel_stream.cli.api import PORT_HINT
from keel_stream.cli.options import ApiPort, Bootstrap, DatabaseUrl, DataDir, load_settings
from keel_stream.cli.preflight import ensure_port_free
from keel_stream.dev.lock import ensure_not_running
from keel_stream.settings import env_var, process_environ

__all__ = ["dev"]

METRICS_HINT = "dev serves metrics on KEEL_METRICS_PORT and the two ports after it; choose another"


def dev(
    database_url: DatabaseUrl = None,
    bootstrap: Bootstrap = None,
    data_dir: DataDir = None,
    port: ApiPort = None,
    kafka: Annotated[
        str | None,
        typer.Option(
            "--kafka",
            envvar=env_var("dev_kafka"),
            help="The broker to start without KEEL_KAFKA_BOOTSTRAP: embedded (memory-only) or "
            "apache (durable Apache Kafka under the data directory; Java 17+ and Maven).",
            show_default="embedded",
        ),
    ] = None,
    once: Annotated[
        bool, typer.Option("--once", help="Start, report and exit instead of serving.")
    ] = False,
) -> None:
    """Run the whole platform on embedded defaults until Ctrl-C or SIGTERM.

    Embedded PostgreSQL and broker unless KEEL_DATABASE_URL / KEEL_KAFKA_BOOTSTRAP are set; each
    service in a process of its own, restarted when it dies. One dev per data directory; while it
    runs, other commands use its addresses.
    """
    # Imported here: they bring the whole platform, which no other command should import.
    from keel_stream.dev.components import metrics_ports
    from keel_stream.dev.supervisor import supervise

    settings = load_settings(
        database_url=database_url,
        kafka_bootstrap=bootstrap,
        data_dir=data_dir,
        api_port=port,
        dev_kafka=kafka,
        use_running_dev=False,
    )
    # The checks create nothing: a refused start leaves the data directory as it was.
    ensure_not_running(settings.data_dir)
    if not once:
        ensure_port_free(settings.api_host, settings.api_port, hint=PORT_HINT)
        for port in metrics_ports(settings).values():
            ensure_port_free(settings.metrics_host, port, hint=METRICS_HINT)
    status = supervise(settings, process_environ(), once=once, say=typer.echo)
    if status:
        raise typer.Exit(code=status)
